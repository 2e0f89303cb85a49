//! `stealscope probe wakeup|preempt|throughput`: the active measurements of
//! the stealscope-probes crate, as a table or JSON. Ctrl-C / SIGTERM end a
//! run early; the partial report is printed and the system is left as found.

use clap::{Args, Subcommand};
use std::fmt::Write as _;
use std::time::Duration;
use stealscope_probes::{preempt, signals, throughput, wakeup, LatencyStats};

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
    #[arg(long, default_value = "5s", value_parser = crate::args::parse_duration)]
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
            let t = if w.common.json {
                stealscope_output::json::render(&r)
            } else {
                wakeup_text(&r)
            };
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
            let t = if p.common.json {
                stealscope_output::json::render(&r)
            } else {
                preempt_text(&r)
            };
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
            let s = if t.common.json {
                stealscope_output::json::render(&r)
            } else {
                throughput_text(&r)
            };
            (s, r.interrupted)
        }
    };
    if interrupted {
        eprintln!("stealscope: interrupted; report covers the part that ran");
    }
    crate::write_stdout(&text)
}

fn policy_label(policy: &str, priority: u8) -> String {
    if policy == "fifo" {
        format!("SCHED_FIFO {priority}")
    } else {
        "SCHED_OTHER".to_string()
    }
}

fn notes(out: &mut String, notes: &[String]) {
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
}

fn latency_row(out: &mut String, label: &str, s: &LatencyStats, extra: &str) {
    let _ = writeln!(
        out,
        "{label:>5} {:>9} {:>8.1} {:>8.1} {:>9.1} {:>9.1}{extra}",
        s.samples, s.p50_us, s.p99_us, s.p999_us, s.max_us
    );
}

fn wakeup_text(r: &wakeup::WakeupReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "wakeup latency: {:.2} s, interval {} us, {}, memory {}, PM QoS {}",
        r.duration_s,
        r.interval_us,
        policy_label(&r.policy, r.priority),
        if r.memory_locked {
            "locked"
        } else {
            "not locked"
        },
        r.pm_qos_us
            .map_or("not held".to_string(), |u| format!("held at {u} us"))
    );
    let _ = writeln!(
        o,
        "{:>5} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
        "CPU", "samples", "p50 us", "p99 us", "p99.9 us", "max us", "overruns", "steal %"
    );
    for c in &r.cpus {
        let steal = c.steal_pct.map_or("-".to_string(), |s| format!("{s:.2}"));
        latency_row(
            &mut o,
            &c.stats.cpu.map_or("?".into(), |c| c.to_string()),
            &c.stats,
            &format!(" {:>9} {:>7}", c.overruns, steal),
        );
    }
    if r.cpus.len() > 1 {
        latency_row(&mut o, "all", &r.overall, "");
    }
    let _ = writeln!(o, "probe CPU time: {:.3} s", r.cpu_time_s);
    notes(&mut o, &r.notes);
    o
}

fn class_cell(c: &preempt::ClassStats) -> String {
    format!("{} / {:.0}", c.count, c.max_us)
}

fn preempt_text(r: &preempt::PreemptReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "preemption gaps: {:.2} s, threshold {} us, {}, attribution: {}",
        r.duration_s,
        r.threshold_us,
        policy_label(&r.policy, r.priority),
        r.attribution
    );
    let _ = writeln!(
        o,
        "{:>5} {:>7} {:>10} {:>8} {:>14} {:>14} {:>14} {:>16} {:>9} {:>8}",
        "CPU",
        "gaps",
        "noise us/s",
        "avail %",
        "irq n/max us",
        "softirq n/max",
        "thread n/max",
        "unexplained n/max",
        "unexpl %",
        "steal %"
    );
    for c in &r.cpus {
        let _ = writeln!(
            o,
            "{:>5} {:>7} {:>10.1} {:>8.3} {:>14} {:>14} {:>14} {:>16} {:>9.3} {:>8}",
            c.cpu,
            c.gaps,
            c.noise_us_per_s,
            c.available_pct,
            class_cell(&c.classes.irq),
            class_cell(&c.classes.softirq),
            class_cell(&c.classes.thread),
            class_cell(&c.classes.unexplained),
            c.unexplained_pct,
            c.steal_pct.map_or("-".to_string(), |s| format!("{s:.3}"))
        );
    }
    for c in &r.cpus {
        if c.sources.is_empty() {
            continue;
        }
        let _ = writeln!(o, "CPU {} main causes (by time):", c.cpu);
        for s in c.sources.iter().take(6) {
            let _ = writeln!(
                o,
                "  {:<11} {:<34} {:>6} gaps {:>10.1} us total  p50 {:>8.1} us  max {:>9.1} us",
                s.class.as_str(),
                truncate(&s.name, 34),
                s.gaps,
                s.total_us,
                s.p50_us,
                s.max_us
            );
        }
    }
    let _ = writeln!(o, "probe CPU time: {:.3} s", r.cpu_time_s);
    notes(&mut o, &r.notes);
    o
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('~')).collect()
    }
}

fn throughput_text(r: &throughput::ThroughputReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "throughput: {}, {:.2} s in {} ms windows",
        r.kernel, r.duration_s, r.window_ms
    );
    // Two header rows so every column has a name, within 80 columns.
    let head = |o: &mut String, h: [&str; 9]| {
        let _ = writeln!(
            o,
            "{:>4} {:>9} {:>9} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7}",
            h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]
        );
    };
    head(
        &mut o,
        ["", "", "best", "", "", "not", "steal", "steal %", "loss %"],
    );
    head(
        &mut o,
        [
            "CPU", "ops/s", "ops/s", "loss %", "steal %", "run %", "windows", "in them", "in them",
        ],
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    for c in &r.cpus {
        let _ = writeln!(
            o,
            "{:>4} {:>9.0} {:>9.0} {:>6.2} {:>7} {:>7.2} {:>7} {:>7} {:>7}",
            c.cpu,
            c.ops_per_s,
            c.baseline_ops_per_s,
            c.loss_pct,
            opt(c.steal_pct),
            c.not_running_pct,
            c.steal_windows,
            opt(c.steal_window_steal_pct),
            opt(c.steal_window_loss_pct)
        );
    }
    let _ = writeln!(
        o,
        "steal windows: the {} ms windows with any steal; steal % and loss % in them: their mean.",
        r.window_ms
    );
    let _ = writeln!(o, "{}", r.summary);
    notes(&mut o, &r.notes);
    o
}
