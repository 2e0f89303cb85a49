//! Command-line definition (also the source of completions and man pages).

use crate::parse::{parse_duration, parse_rate};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "stealscope",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("STEALSCOPE_GIT_COMMIT"), ")"),
    about = "Who stole my CPU? Steal and jitter diagnosis for KVM guests and hosts",
    long_about = "stealscope measures CPU steal and scheduling jitter inside a VM, tells busy steal \
                  (the host is oversubscribed) from idle steal (host configuration), and names known \
                  causes with evidence and a fix.",
    after_help = "Examples:\n  stealscope doctor                      diagnose this machine (5 s)\n  \
                  stealscope doctor --interval 30s --json\n  \
                  stealscope snapshot -o vm1.tar.gz       capture for offline analysis\n  \
                  stealscope doctor --snapshot vm1.tar.gz analyse a colleague's snapshot"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Sample this machine, run every rule, print findings ranked by severity
    #[command(
        after_help = "Examples:\n  stealscope doctor\n  stealscope doctor --interval 60s\n  \
                            stealscope doctor --json | jq '.findings[].id'\n  \
                            stealscope doctor --snapshot snap.tar.gz\n  \
                            stealscope doctor --save-snapshot evidence.tar.gz\n  \
                            stealscope doctor --probe               also run the wakeup and preempt probes\n\n\
                            Exit status: 0 whatever is found; 2 on error (bad snapshot, unreadable root)."
    )]
    Doctor(DoctorCmd),
    /// Host view: every VM and vCPU thread, the steal each suffers, host findings
    #[command(
        after_help = "Examples:\n  stealscope host\n  stealscope host --interval 10s --json | jq '.vms[] | {name, steal_pct}'\n  \
                            stealscope host --snapshot host.tar.gz\n\n\
                            VMs are QEMU (KVM or TCG), Firecracker and libvirt-managed processes. A vCPU's host steal is \
                            the run-queue wait of its thread (/proc/<pid>/task/<tid>/schedstat), which is exactly the \
                            steal its guest reports."
    )]
    Host(DoctorArgs),
    /// Capture every file the rules read, at the start and end of an interval
    #[command(
        after_help = "Examples:\n  stealscope snapshot -o snap/\n  stealscope snapshot -o vm1.tar.gz --interval 30s\n  \
                            stealscope snapshot -o for-vendor.tar.gz --redact\n  \
                            stealscope snapshot --from vm1.tar.gz --redact -o vm1-redacted.tar.gz\n\n\
                            The snapshot (format stealscope-snapshot/1) holds meta.json, t0/ and t1/ with the files \
                            under their absolute paths, and samples.jsonl with the /proc/stat series. Of the kernel \
                            log it keeps only the messages the rules read. What it contains: docs/snapshot.md."
    )]
    Snapshot(SnapshotArgs),
    /// Record per-CPU time series and exact steal episodes to a file (bounded memory) until Ctrl-C or --duration
    #[command(
        after_help = "Examples:\n  stealscope record -o vm1.ssr                     until Ctrl-C\n  \
                            stealscope record -o vm1.ssr --rate 1000 --duration 10m\n  \
                            stealscope record -o vm1.ssr --probe wakeup      plus wake-up latency per CPU per second\n  \
                            stealscope doctor --snapshot vm1.ssr             the findings over the recording\n\n\
                            Steal: exact, event by event, from the guest steal collector (BPF, root) when it loads: \
                            each episode over --steal-threshold with its time and victim, /proc/stat then at 1 Hz; \
                            else /proc/stat polled at 100 Hz, and the recording says why. \
                            Records every /proc/stat column per CPU at --rate, /proc/interrupts per CPU at --irq-rate, \
                            on a host every vCPU thread's run and wait time once a second, the hardware counters \
                            when the machine has them, and every file doctor reads each --checkpoint. Ctrl-C or \
                            SIGTERM finish the file; a recording cut off (kill -9, crash) reads up to its last \
                            complete record. Format: docs/recording-format.md."
    )]
    Record(crate::record_cmd::RecordArgs),
    /// Active measurements: timer wake-up latency, preemption gaps, throughput vs steal
    #[command(
        after_help = "Examples:\n  stealscope probe wakeup                        cyclictest-style latency, 5 s\n  \
                            stealscope probe preempt --cpus 1 --json       gaps and who caused them\n  \
                            stealscope probe throughput --duration 30s     ops/s per 100 ms vs steal\n  \
                            stealscope probe wakeup --no-change            change nothing on the system\n\n\
                            Ctrl-C or SIGTERM end a run early with a partial report; priorities, memory lock, \
                            PM QoS and the tracing instance are released on every path."
    )]
    Probe(crate::probe_cmd::ProbeArgs),
    /// Placement daemon: pin VMs to CPUs and NUMA nodes, fair CPU for shared VMs, safe memory moves
    #[command(
        after_help = "Examples:\n  stealscope place plan                   what it would do and why (read-only)\n  \
                            stealscope place apply                  dry run: the actions, nothing changed\n  \
                            stealscope place apply --yes            journal and apply\n  \
                            stealscope place undo --yes             restore the placement before the last apply\n  \
                            stealscope place daemon --yes           every 10 s, logs each decision\n\n\
                            Config: /etc/stealscope/place.toml (dedicated VM globs, housekeeping CPUs, fairness, \
                            intervals, memory margins). Journal: /var/lib/stealscope/place.journal."
    )]
    Place(crate::place_cmd::PlaceArgs),
    /// Prometheus exporter: samples in the background and serves /metrics (read-only)
    #[command(
        after_help = "Examples:\n  stealscope serve                                 127.0.0.1:9464, 10 Hz\n  \
                            stealscope serve --listen [::1]:9464 --rate 20\n  \
                            stealscope serve --textfile /var/lib/prometheus/node-exporter/stealscope.prom\n\n\
                            Metrics (docs/contract.md): stealscope_cpu_seconds_total{cpu,mode}, stealscope_steal_window_ratio \
                            (histogram per cpu), stealscope_vcpu_wait_seconds_total / vcpu_run_seconds_total{vm,vcpu} \
                            on hosts, stealscope_finding{id,severity}, stealscope_build_info. Runs as any user; \
                            alert rules and a dashboard are in deploy/."
    )]
    Serve(crate::serve_cmd::ServeArgs),
    /// Live terminal view: per-CPU busy/steal/idle, steal per 100 ms, findings, VMs on a host
    #[command(
        after_help = "Examples:\n  stealscope top                          10 Hz: 100 ms steal windows\n  \
                            stealscope top --rate 50 --findings-interval 10s\n\n\
                            Keys: q, Esc or Ctrl-C quit; ? or h help; p pause; + and - sampling rate; \
                            s sort the VM table. Bars cover the last second; each sparkline cell is one \
                            window. The doctor rules run in the background over each --findings-interval. \
                            Needs a terminal (exit 2 otherwise)."
    )]
    Top(crate::top_cmd::TopArgs),
    /// Simulate a host or a fleet: per-vCPU steal under cgroup layouts and placement policies
    #[command(
        after_help = "Examples:\n  stealscope sim scenarios/talk-cgroups.toml            compare its cases, 5 seeds\n  \
                            stealscope sim scenarios/calibration-2cpu.toml --seeds 10 --json\n  \
                            stealscope sim scenarios/fleet.toml --hosts 1000 --policy stealscope\n\n\
                            The model: per-CPU run queues with CFS group scheduling (a group's weight split over CPUs \
                            by its load there), a load balancer after the kernel's, NUMA costs; policies none, numad \
                            and stealscope's planner (the code of `place`). Scenario format: scenarios/README.md."
    )]
    Sim(crate::sim_cmd::SimArgs),
    /// The fleet from Prometheus: which VM to move to which host (plan), steal at a glance (status)
    #[command(
        after_help = "Examples:\n  stealscope fleet status --prometheus http://127.0.0.1:9090\n  \
                            stealscope fleet plan --prometheus http://127.0.0.1:9090 --window 24h --steps 96\n  \
                            stealscope fleet plan --prometheus http://prom:9090 --selector 'dc=\"eu1\"' --commands virsh\n\n\
                            Reads what `stealscope serve` exports on every host in a few aggregated queries. Only busy \
                            steal moves VMs (idle steal is fixed on the host by `place`); the named culprits of \
                            host.noisy-neighbor move first; every move is checked in the simulator with the VMs' \
                            measured demand history. Prints the virsh, openstack and KubeVirt commands; migrates nothing. \
                            docs/fleet.md."
    )]
    Fleet(crate::fleet_cmd::FleetArgs),
    /// Draw a snapshot or recording as one self-contained HTML page (or print it as text)
    #[command(
        after_help = "Examples:\n  stealscope snapshot -o vm1.tar.gz --interval 60s && stealscope report vm1.tar.gz -o vm1.html\n  \
                            stealscope report host.ssr                       text: the findings, who stole it over time\n\n\
                            The page has no script and loads nothing (a Content-Security-Policy forbids every fetch): \
                            per-CPU steal heat map, busy/idle/steal over time, a histogram of steal per short window \
                            (bursts), IPC next to steal when counters were read, interrupts per CPU, the findings in \
                            the doctor's order with their evidence, and the notes. Long series are binned to at most \
                            200 columns."
    )]
    Report(crate::report_cmd::ReportArgs),
    /// Print shell completions to stdout
    #[command(
        after_help = "Examples:\n  stealscope completions bash > /etc/bash_completion.d/stealscope\n  \
                            stealscope completions zsh > ~/.zfunc/_stealscope"
    )]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (one per command) into a directory
    #[command(after_help = "Examples:\n  stealscope man --dir /usr/local/share/man/man1")]
    Man {
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

#[derive(Args, Debug, Clone)]
pub struct SampleArgs {
    /// How long to sample (e.g. 5s, 500ms, 1m; a bare number is seconds)
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Rate of the /proc/stat series inside the interval, Hz (0 = none)
    #[arg(long, default_value_t = 10.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Read /proc and /sys under this directory instead of /
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub sample: SampleArgs,
    /// Machine-readable output (schema stealscope/doctor/1, for `host` stealscope/host/1)
    #[arg(long)]
    pub json: bool,
    /// Analyse a snapshot (directory or .tar.gz) or a recording instead of this machine
    #[arg(long, value_name = "PATH")]
    pub snapshot: Option<PathBuf>,
    /// Also write what was sampled as a snapshot (directory or .tar.gz)
    #[arg(long, value_name = "PATH", conflicts_with = "snapshot")]
    pub save_snapshot: Option<PathBuf>,
    /// Colour in the text report
    #[arg(long, value_enum, default_value = "auto")]
    pub color: ColorChoice,
    /// Every note in full and every evidence value in the text report (as in --json)
    #[arg(short = 'v', long)]
    pub verbose: bool,
    #[command(flatten)]
    pub host: crate::host_args::HostArgs,
}

/// `doctor`: the common report flags plus the active probes.
#[derive(Args, Debug)]
pub struct DoctorCmd {
    #[command(flatten)]
    pub report: DoctorArgs,
    /// After sampling, also run the wakeup and preempt probes (jitter.* findings);
    /// adds twice --probe-duration
    #[arg(long, conflicts_with = "snapshot")]
    pub probe: bool,
    /// How long each probe runs with --probe
    #[arg(long, default_value = "5s", value_parser = parse_duration, requires = "probe")]
    pub probe_duration: Duration,
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Output directory, or a file ending in .tar.gz
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: PathBuf,
    #[command(flatten)]
    pub sample: SampleArgs,
    /// Replace the host name, VM names and command lines with placeholders
    /// (host, vm1, vm2...), keeping every figure
    #[arg(long)]
    pub redact: bool,
    /// Rewrite this snapshot (or recording) instead of capturing: with --redact
    #[arg(long, value_name = "PATH", requires = "redact")]
    pub from: Option<PathBuf>,
}
