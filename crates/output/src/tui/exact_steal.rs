//! Exact guest steal (issue 30) under the steal lines: the busy/idle split
//! over the last 10 s from the BPF collector, then the longest episodes of
//! the last minute with their victims; or, when the collector cannot run,
//! that the steal above is /proc/stat's and why.

use super::findings::fit;
use super::heading_and_body;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;
use stealscope_model::exact_steal::EpisodeExact;
use stealscope_model::running_exact_steal::{RunningExactSteal, StealRoute};

/// Episode lines the panel would like.
pub const EPISODES_SHOWN: usize = 3;

/// Reason lines shown at most (the rest of a longer one is cut).
const REASON_ROWS: usize = 3;

/// Rows (heading included) the panel would like at `width` columns; like
/// every panel it needs two, so that a short terminal keeps its CPU rows
/// instead.
pub fn ideal_rows(e: &RunningExactSteal, width: u16) -> usize {
    match &e.route {
        StealRoute::Starting => 2,
        StealRoute::Bpf => 1 + e.largest(EPISODES_SHOWN).len().max(1),
        // The reason wrapped at the width (a word may push it a line on).
        StealRoute::ProcStat { .. } => {
            let chars = why(e).chars().count();
            1 + chars
                .div_ceil(usize::from(width).max(1))
                .clamp(1, REASON_ROWS)
        }
    }
}

fn why(e: &RunningExactSteal) -> String {
    format!("  why: {}", e.route.reason())
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |p| format!("{p:.2}%"))
}

/// The heading's text after "exact steal".
fn heading(e: &RunningExactSteal) -> String {
    match &e.route {
        StealRoute::Starting => ": loading the BPF collector".into(),
        StealRoute::ProcStat { .. } => " n/a: the steal above is /proc/stat's (10 ms units)".into(),
        StealRoute::Bpf => match e.recent() {
            None => " (BPF): first reading".into(),
            Some(r) => format!(
                " (BPF), last {:.0} s: busy {}, idle {}, {} episodes",
                r.span_s,
                pct(r.pct(r.busy_ns)),
                pct(r.pct(r.idle_ns)),
                r.episodes
            ),
        },
    }
}

/// One episode: length, CPU, age, and who lost it.
fn episode_line(e: &EpisodeExact, now_ns: u64) -> String {
    let age_s = now_ns.saturating_sub(e.monotonic_ns) as f64 / 1e9;
    let who = match &e.victim {
        None => "idle (the host was slow to run the woken vCPU)".to_string(),
        Some(t) => match &t.thread {
            Some(th) => format!("busy: {}[{}] thread {th}", t.comm, t.pid),
            None => format!("busy: {}[{}]", t.comm, t.pid),
        },
    };
    format!(
        "{:>8.2} ms  cpu{:<3} {:>3.0} s ago  {who}",
        e.ns as f64 / 1e6,
        e.cpu,
        age_s
    )
}

pub fn render(frame: &mut Frame, area: Rect, e: &RunningExactSteal) {
    let (head, body) = heading_and_body(area);
    let width = usize::from(area.width);
    let title = fit(&format!("exact steal{}", heading(e)), width);
    let cut = if title.starts_with("exact steal") {
        11
    } else {
        0
    };
    let (bold, rest) = title.split_at(cut);
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(bold.to_string(), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(rest.to_string()),
        ])),
        head,
    );
    if body.height == 0 {
        return;
    }
    let lines: Vec<Line> = match &e.route {
        StealRoute::Starting => Vec::new(),
        StealRoute::ProcStat { .. } => vec![Line::from(why(e))],
        StealRoute::Bpf => {
            let now = e.newest_ns().unwrap_or(0);
            let largest = e.largest(usize::from(body.height));
            if largest.is_empty() {
                vec![Line::from(format!(
                    "  no episode of {:.1} ms or more in the last minute",
                    e.threshold_ns as f64 / 1e6
                ))]
            } else {
                largest
                    .into_iter()
                    .map(|x| Line::from(fit(&episode_line(x, now), width)))
                    .collect()
            }
        }
    };
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), body);
}

#[cfg(test)]
mod tests {
    use super::super::testing::screen;
    use super::*;
    use stealscope_model::running_exact_steal::ExactReading;
    use stealscope_who::{CpuSteal, GuestStealSample, StealEpisode, StealTaskId, StealVictim};

    fn running() -> RunningExactSteal {
        let mut e = RunningExactSteal::default();
        e.apply(ExactReading::Running);
        let cpu = |busy: u64, idle: u64| CpuSteal {
            cpu: 0,
            busy_ns: busy,
            idle_ns: idle,
            hook_runs: 1,
            ..CpuSteal::default()
        };
        let victim = StealVictim::Task(StealTaskId {
            tid: 813,
            tgid: 812,
            start_ns: 1,
            comm: "bgworker".into(),
        });
        let ep = |seq, t: u64, ns, victim| StealEpisode {
            seq,
            monotonic_ns: t,
            cpu: 0,
            ns,
            victim,
        };
        e.apply(ExactReading::Cpus {
            t_ns: 1_000_000_000,
            cpus: vec![cpu(0, 0)],
        });
        e.apply(ExactReading::Full {
            sample: GuestStealSample {
                monotonic_ns: 11_000_000_000,
                threshold_ns: 100_000,
                cpus: vec![cpu(20_000_000, 5_000_000)],
                tasks: vec![],
                episodes: vec![
                    ep(0, 3_000_000_000, 18_200_000, victim),
                    ep(1, 9_000_000_000, 350_000, StealVictim::Idle),
                ],
                episodes_seen: 2,
            },
            processes: [(812, "postgres".to_string())].into(),
        });
        e
    }

    #[test]
    fn the_split_and_the_longest_episodes_fit_80_columns() {
        let e = running();
        let rows = screen(80, 4, |f| render(f, f.area(), &e));
        // 20 ms busy and 5 ms idle of one CPU's 10 s.
        assert_eq!(
            rows[0].trim_end(),
            "exact steal (BPF), last 10 s: busy 0.20%, idle 0.05%, 0 episodes"
        );
        assert_eq!(
            rows[1].trim_end(),
            "   18.20 ms  cpu0     8 s ago  busy: postgres[812] thread bgworker"
        );
        assert!(
            rows[2].starts_with("    0.35 ms  cpu0     2 s ago  idle (the host"),
            "{rows:?}"
        );
        assert!(rows[2].chars().count() <= 80);
        assert_eq!(rows[3].trim(), "");
        // Narrow: cut at a word with an ellipsis, never past the edge.
        let rows = screen(40, 3, |f| render(f, f.area(), &e));
        assert!(rows[1].trim_end().ends_with('…'), "{rows:?}");
    }

    #[test]
    fn the_fallback_says_why() {
        let mut e = RunningExactSteal::default();
        let rows = screen(80, 2, |f| render(f, f.area(), &e));
        assert_eq!(rows[0].trim_end(), "exact steal: loading the BPF collector");
        e.apply(ExactReading::Unavailable(
            "bpf(BPF_PROG_LOAD): Operation not permitted (needs root or CAP_BPF and CAP_PERFMON)"
                .into(),
        ));
        let rows = screen(80, 3, |f| render(f, f.area(), &e));
        assert_eq!(
            rows[0].trim_end(),
            "exact steal n/a: the steal above is /proc/stat's (10 ms units)"
        );
        let why = format!("{}{}", rows[1], rows[2]);
        assert!(
            why.contains("why: bpf(BPF_PROG_LOAD): Operation not permitted"),
            "{rows:?}"
        );
        assert!(why.contains("CAP_PERFMON"), "wrapped, not cut: {rows:?}");
    }
}
