//! `probe wakeup|preempt|throughput` as text: one row per CPU, the
//! overall row, the main causes of preemption gaps, and the probe's notes.

use std::fmt::Write as _;
use stealscope_probes::{preempt, throughput, wakeup, LatencyStats};

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

pub fn wakeup(r: &wakeup::WakeupReport) -> String {
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

pub fn preempt(r: &preempt::PreemptReport) -> String {
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

pub fn throughput(r: &throughput::ThroughputReport) -> String {
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
