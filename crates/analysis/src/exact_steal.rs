//! The report's exact guest steal (issue 30): what the guest steal
//! collector measured over the capture, in ns and per episode, with the
//! task each busy episode hit and the idle share (the talk's split,
//! measured instead of inferred), or why it did not run.

use serde::Serialize;
use stealscope_findings::units::round;
use stealscope_model::exact_steal::{ExactSteal, StoredExactSteal, TaskExact};

/// A task that lost busy steal, with its share of all busy steal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Victim {
    pub comm: String,
    pub pid: u32,
    pub busy_ms: f64,
    /// Share of the busy steal, 0..1.
    pub share: f64,
}

/// One CPU's steal over the span.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuLine {
    pub cpu: u32,
    pub steal_pct: f64,
    pub busy_ms: f64,
    pub idle_ms: f64,
    pub episodes: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
    pub max_ms: f64,
}

/// One of the largest episodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    pub cpu: u32,
    pub ms: f64,
    /// "postgres (pid 812)", or "idle".
    pub hit: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// One line for the text report.
    pub headline: String,
    pub span_s: f64,
    pub steal_pct: f64,
    /// Shares of all steal, 0..1.
    pub busy_share: f64,
    pub idle_share: f64,
    pub episodes: u64,
    pub over_1ms: u64,
    pub over_10ms: u64,
    pub max_ms: f64,
    pub cpus: Vec<CpuLine>,
    pub victims: Vec<Victim>,
    pub largest: Vec<Episode>,
    /// Episodes over the listing threshold that are not listed.
    pub unlisted: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ExactStealSection {
    Measured(Measured),
    Unavailable { reason: String },
}

fn ms(ns: u64) -> f64 {
    round(ns as f64 / 1e6, 3)
}

fn who(t: &TaskExact) -> String {
    format!("{} (pid {})", t.comm, t.pid)
}

/// Busy steal by process, most first: a process's threads are one victim.
fn victims(e: &ExactSteal) -> Vec<Victim> {
    let busy = e.busy_ns().max(1) as f64;
    let mut by: Vec<(String, u32, u64)> = Vec::new();
    for t in &e.tasks {
        match by.iter_mut().find(|v| v.1 == t.pid) {
            Some(v) => v.2 += t.busy_ns,
            None => by.push((t.comm.clone(), t.pid, t.busy_ns)),
        }
    }
    by.sort_by(|a, b| b.2.cmp(&a.2).then(a.1.cmp(&b.1)));
    by.into_iter()
        .map(|(comm, pid, ns)| Victim {
            comm,
            pid,
            busy_ms: ms(ns),
            share: round(ns as f64 / busy, 3),
        })
        .collect()
}

fn headline(m: &Measured) -> String {
    let mut s = format!(
        "{:.2} % of CPU time over {:.1} s, {} episode{}, {} over 10 ms, max {:.1} ms",
        m.steal_pct,
        m.span_s,
        m.episodes,
        if m.episodes == 1 { "" } else { "s" },
        m.over_10ms,
        m.max_ms
    );
    if let Some(v) = m.victims.first().filter(|_| m.busy_share > 0.0) {
        s.push_str(&format!(
            "; busy steal hit {} (pid {}) {:.0} %",
            v.comm,
            v.pid,
            100.0 * v.share
        ));
    }
    s.push_str(&format!(", idle steal {:.0} %", 100.0 * m.idle_share));
    s
}

fn measured(e: &ExactSteal) -> Measured {
    let (busy, idle) = (e.busy_ns(), e.idle_ns());
    let all = (busy + idle).max(1) as f64;
    let cpu_pct = |ns: u64| {
        if e.span_s > 0.0 {
            round(100.0 * ns as f64 / 1e9 / e.span_s, 3)
        } else {
            0.0
        }
    };
    let mut m = Measured {
        headline: String::new(),
        span_s: round(e.span_s, 3),
        steal_pct: round(e.pct().unwrap_or(0.0), 3),
        busy_share: round(busy as f64 / all, 3),
        idle_share: round(idle as f64 / all, 3),
        episodes: e.cpus.iter().map(|c| c.episodes).sum(),
        over_1ms: e.cpus.iter().map(|c| c.over_1ms).sum(),
        over_10ms: e.cpus.iter().map(|c| c.over_10ms).sum(),
        max_ms: ms(e.cpus.iter().map(|c| c.max_ns).max().unwrap_or(0)),
        cpus: e
            .cpus
            .iter()
            .map(|c| CpuLine {
                cpu: c.cpu,
                steal_pct: cpu_pct(c.busy_ns + c.idle_ns),
                busy_ms: ms(c.busy_ns),
                idle_ms: ms(c.idle_ns),
                episodes: c.episodes,
                over_1ms: c.over_1ms,
                over_10ms: c.over_10ms,
                max_ms: ms(c.max_ns),
            })
            .collect(),
        victims: victims(e),
        largest: e
            .largest
            .iter()
            .map(|x| Episode {
                cpu: x.cpu,
                ms: ms(x.ns),
                hit: x.victim.as_ref().map_or_else(|| "idle".into(), who),
            })
            .collect(),
        unlisted: e.unlisted,
    };
    m.headline = headline(&m);
    m
}

/// The section, from what the end side stored.
pub fn section(stored: Option<&StoredExactSteal>) -> Option<ExactStealSection> {
    Some(match stored? {
        StoredExactSteal::Measured(e) => ExactStealSection::Measured(measured(e)),
        StoredExactSteal::Unavailable { reason } => ExactStealSection::Unavailable {
            reason: reason.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_model::exact_steal::CpuExact;

    fn task(pid: u32, tid: u32, comm: &str, busy_ns: u64) -> TaskExact {
        TaskExact {
            pid,
            tid,
            comm: comm.into(),
            thread: None,
            busy_ns,
            episodes: 1,
        }
    }

    #[test]
    fn a_processs_threads_are_one_victim_and_the_split_adds_up() {
        let e = ExactSteal {
            span_s: 10.0,
            threshold_ns: 100_000,
            cpus: vec![
                CpuExact {
                    cpu: 0,
                    busy_ns: 60_000_000,
                    idle_ns: 40_000_000,
                    episodes: 12,
                    over_10ms: 1,
                    max_ns: 18_200_000,
                    ..Default::default()
                },
                CpuExact {
                    cpu: 1,
                    busy_ns: 20_000_000,
                    episodes: 3,
                    ..Default::default()
                },
            ],
            tasks: vec![
                task(812, 812, "postgres", 40_000_000),
                task(900, 900, "cron", 20_000_000),
                task(812, 813, "postgres", 20_000_000),
            ],
            largest: vec![],
            unlisted: 0,
            readings_ns: None,
        };
        let ExactStealSection::Measured(m) = section(Some(&StoredExactSteal::Measured(e))).unwrap()
        else {
            panic!()
        };
        // 120 ms of steal over 2 CPUs x 10 s.
        assert!((m.steal_pct - 0.6).abs() < 1e-9, "{m:?}");
        assert!((m.busy_share + m.idle_share - 1.0).abs() < 1e-9);
        assert_eq!(m.victims[0].pid, 812);
        assert!((m.victims[0].share - 0.75).abs() < 1e-9, "{m:?}");
        assert_eq!(m.episodes, 15);
        assert_eq!(
            m.headline,
            "0.60 % of CPU time over 10.0 s, 15 episodes, 1 over 10 ms, max 18.2 ms; \
             busy steal hit postgres (pid 812) 75 %, idle steal 33 %"
        );
        assert!((m.cpus[0].steal_pct - 1.0).abs() < 1e-9);
    }
}
