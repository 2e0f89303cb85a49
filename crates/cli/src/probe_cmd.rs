//! `stealscope probe wakeup|preempt|throughput`: the active measurements of
//! the stealscope-probes crate, as a table or JSON. Ctrl-C / SIGTERM end a
//! run early; the partial report is printed and the system is left as found.

use clap::{Args, Subcommand};
use std::time::Duration;
use stealscope_output::json::or_text;
use stealscope_probes::{preempt, signals, throughput, wakeup};

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct ProbeArgs {
    #[command(subcommand)]
    pub probe: ProbeKind,
}

#[derive(Subcommand, Debug)]
pub enum ProbeKind {
    /// Timer wake-up latency, cyclictest-style: pinned SCHED_FIFO thread per CPU, absolute deadlines
    #[command(after_help = "Examples:\n  stealscope probe wakeup\n  \
                            stealscope probe wakeup --cpus 1 --duration 60s --interval-us 500\n  \
                            stealscope probe wakeup --pm-qos-us 0      hold C-states off for the run\n  \
                            stealscope probe wakeup --no-change --json changes nothing on the system\n\n\
                            Needs root (or CAP_SYS_NICE and CAP_IPC_LOCK) for SCHED_FIFO and mlock; without \
                            them it runs SCHED_OTHER and says so in the notes.")]
    Wakeup(WakeupArgs),
    /// Gaps where the vCPU did not run (osnoise-style spinner), attributed to guest IRQ, softirq, thread or hypervisor
    #[command(after_help = "Examples:\n  stealscope probe preempt\n  \
                            stealscope probe preempt --cpus 1 --duration 30s --threshold-us 10\n  \
                            stealscope probe preempt --priority 50     spin SCHED_FIFO (starves other threads)\n  \
                            stealscope probe preempt --json | jq '.cpus[].classes.unexplained'\n\n\
                            Attribution uses a private tracefs instance (irq, softirq, sched_switch events; \
                            needs root) and falls back to per-CPU counters otherwise. 'unexplained' time is \
                            when no guest event ran: the hypervisor had the vCPU.")]
    Preempt(PreemptArgs),
    /// Fixed compute kernel per CPU: ops/s per window next to that window's steal
    #[command(after_help = "Examples:\n  stealscope probe throughput\n  \
                            stealscope probe throughput --cpus 0 --duration 60s --window-ms 200 --json\n\n\
                            Changes nothing on the system; runs as any user.")]
    Throughput(ThroughputArgs),
}

/// A CPU list in the kernel's format: "0-3,8".
#[derive(Debug, Clone)]
pub struct CpuList(pub Vec<u32>);

fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let v = stealscope_readers::cpulist::parse(s, "--cpus").map_err(|e| e.to_string())?;
    if v.is_empty() {
        return Err("no CPU in the list".into());
    }
    Ok(CpuList(v))
}

#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// CPUs to probe, kernel list format (e.g. 1 or 0-3,8); default all
    #[arg(long, value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,
    /// How long to run (e.g. 5s, 500ms, 1m)
    #[arg(long, default_value = "5s", value_parser = crate::parse::parse_duration)]
    pub duration: Duration,
    /// Change nothing on the system: no SCHED_FIFO, no mlock, no PM QoS, no tracing instance
    #[arg(long)]
    pub no_change: bool,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct WakeupArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Period between deadlines, µs
    #[arg(long, default_value_t = 1000, value_name = "US")]
    pub interval_us: u64,
    /// SCHED_FIFO priority 1-99 (0 = SCHED_OTHER)
    #[arg(long, default_value_t = 95, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub priority: u8,
    /// Hold /dev/cpu_dma_latency at this many µs during the run (0 = no deep C-states)
    #[arg(long, value_name = "US")]
    pub pm_qos_us: Option<u32>,
}

#[derive(Args, Debug)]
pub struct PreemptArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Record gaps longer than this, µs
    #[arg(long, default_value_t = 5.0, value_name = "US")]
    pub threshold_us: f64,
    /// Spinner SCHED_FIFO priority 1-99; 0 = SCHED_OTHER (shares the CPU with other threads)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=99))]
    pub priority: u8,
    /// Attribute gaps from counters even when tracefs is available
    #[arg(long)]
    pub counters: bool,
}

#[derive(Args, Debug)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Window length, ms
    #[arg(long, default_value_t = 100, value_name = "MS")]
    pub window_ms: u64,
}

fn cpus(c: &CommonArgs) -> Option<Vec<u32>> {
    c.cpus.as_ref().map(|l| l.0.clone())
}

pub fn run(a: &ProbeArgs) -> Result<(), Error> {
    let stop = signals::stop_on_signals()?;
    let (text, interrupted) = match &a.probe {
        ProbeKind::Wakeup(w) => {
            let r = wakeup::run(
                &wakeup::WakeupOptions {
                    cpus: cpus(&w.common),
                    duration: w.common.duration,
                    interval: Duration::from_micros(w.interval_us),
                    priority: w.priority,
                    pm_qos_us: w.pm_qos_us,
                    no_change: w.common.no_change,
                },
                &stop,
            )?;
            let t = or_text(w.common.json, &r, || stealscope_output::probe::wakeup(&r));
            (t, r.interrupted)
        }
        ProbeKind::Preempt(p) => {
            if !(p.threshold_us.is_finite() && p.threshold_us > 0.0) {
                return Err("--threshold-us must be above 0".into());
            }
            let r = preempt::run(
                &preempt::PreemptOptions {
                    cpus: cpus(&p.common),
                    duration: p.common.duration,
                    threshold: Duration::from_secs_f64(p.threshold_us / 1e6),
                    priority: p.priority,
                    no_change: p.common.no_change,
                    tracefs: !p.counters,
                    ..Default::default()
                },
                &stop,
            )?;
            let t = or_text(p.common.json, &r, || stealscope_output::probe::preempt(&r));
            (t, r.interrupted)
        }
        ProbeKind::Throughput(t) => {
            let r = throughput::run(
                &throughput::ThroughputOptions {
                    cpus: cpus(&t.common),
                    duration: t.common.duration,
                    window: Duration::from_millis(t.window_ms),
                },
                &stop,
            )?;
            let s = or_text(t.common.json, &r, || {
                stealscope_output::probe::throughput(&r)
            });
            (s, r.interrupted)
        }
    };
    if interrupted {
        eprintln!("stealscope: interrupted; report covers the part that ran");
    }
    crate::write_stdout(&text)
}
