//! Exact guest steal (issue 30): the route that measured steal and why,
//! per CPU the totals with the busy/idle split and the episodes over 1 and
//! 10 ms, every listed episode on the time line (one lane per CPU, height
//! by its length on a log scale, red when it hit a task, grey when the
//! CPU was idle), and the largest with their time and victim.

use super::svg::{self, n1, LEFT, TOP};
use crate::bins::TimeBins;
use crate::text::exact_steal_victim as victim;
use maud::{html, Markup};
use stealscope_analysis::exact_steal::{ExactStealSection, Measured, Victim};
use stealscope_model::timeline::{StealMark, Timeline};

pub const ID: &str = "exact-steal";
const TITLE: &str = "Exact steal";
/// Episodes drawn at most (the longest): the page stays small.
pub const MAX_MARKS: usize = 5000;
const LANE: f64 = 26.0;
/// The log scale of a mark's height: 1 µs to 100 ms.
const LO_NS: f64 = 1e3;
const HI_NS: f64 = 1e8;

fn cpu_table(m: &Measured) -> Markup {
    html! {
        table class="cpus exact" {
            tr { th { "CPU" } th { "steal %" } th { "busy ms" } th { "idle ms" } th { "episodes" } th { "> 1 ms" } th { "> 10 ms" } th { "max ms" } }
            @for c in &m.cpus {
                tr {
                    td { (c.cpu) } td { (format!("{:.3}", c.steal_pct)) } td { (format!("{:.3}", c.busy_ms)) }
                    td { (format!("{:.3}", c.idle_ms)) } td { (c.episodes) } td { (c.over_1ms) } td { (c.over_10ms) }
                    td { (format!("{:.3}", c.max_ms)) }
                }
            }
        }
    }
}

fn height(ns: u64) -> f64 {
    let f = ((ns as f64).max(LO_NS) / LO_NS).log10() / (HI_NS / LO_NS).log10();
    (LANE - 6.0) * f.clamp(0.05, 1.0)
}

fn hover(m: &StealMark, procs: &[Victim]) -> String {
    format!(
        "+{:.3} s, cpu{}: {:.3} ms, {}",
        m.t_s,
        m.cpu,
        m.ns as f64 / 1e6,
        victim(m, procs)
    )
}

/// The episodes on the time line, `wall_s` long from the first sample.
fn marks(t: &Timeline, m: &Measured, wall_s: f64) -> Markup {
    let cpus: Vec<u32> = m.cpus.iter().map(|c| c.cpu).collect();
    let Some(bins) = TimeBins::over([(0.0, wall_s)], 1) else {
        return html! {};
    };
    let span = bins.span_s();
    let x = |t_s: f64| LEFT + svg::plot_w() * ((t_s - bins.t0) / span).clamp(0.0, 1.0);
    let lane_of = |cpu: u32| cpus.iter().position(|&c| c == cpu);
    let h = TOP + LANE * cpus.len() as f64;
    let shown = t.largest_steal(MAX_MARKS);
    let body = html! {
        @for (i, c) in cpus.iter().enumerate() {
            text x=(n1(LEFT - 8.0)) y=(n1(TOP + LANE * (i as f64 + 0.7))) text-anchor="end" { "cpu" (c) }
            line class="marker" x1=(n1(LEFT)) x2=(n1(LEFT + svg::plot_w())) y1=(n1(TOP + LANE * (i as f64 + 1.0))) y2=(n1(TOP + LANE * (i as f64 + 1.0))) {}
        }
        @for e in &shown {
            @if let Some(i) = lane_of(e.cpu) {
                @let base = TOP + LANE * (i as f64 + 1.0);
                line x1=(n1(x(e.t_s))) x2=(n1(x(e.t_s))) y1=(n1(base)) y2=(n1(base - height(e.ns)))
                    stroke=(if e.victim.is_some() { "#c0392b" } else { "#7f8c8d" }) stroke-width="1.5" {
                    title { (hover(e, &m.victims)) }
                }
            }
        }
        (svg::time_axis(&bins, h))
    };
    svg::svg(
        "exact-steal-timeline",
        h + svg::BOTTOM,
        "Steal episodes over time",
        body,
    )
}

fn largest(t: &Timeline, procs: &[Victim]) -> Markup {
    html! {
        table class="vms exact-largest" {
            tr { th { "time" } th title="kvm-clock: this VM's clock on its host, to join a host recording" { "kvm-clock" } th { "CPU" } th { "ms" } th { "hit" } }
            @for m in t.largest_steal(crate::text::EXACT_LARGEST) {
                tr {
                    td class="num" { (format!("+{:.3} s", m.t_s)) }
                    td class="num" { (m.kvmclock_ns.map_or("-".into(), |k| format!("{:.6} s", k as f64 / 1e9))) }
                    td class="num" { (m.cpu) }
                    td class="num" { (format!("{:.3}", m.ns as f64 / 1e6)) } td { (victim(m, procs)) }
                }
            }
        }
    }
}

/// The section: the doctor's exact steal, the time line's episodes and
/// route (a recording's), or why there is none.
pub fn render(section: Option<&ExactStealSection>, t: &Timeline, wall_s: f64) -> Markup {
    let route = t.steal.as_ref().map(|r| r.describe());
    let m = match section {
        Some(ExactStealSection::Measured(m)) => m,
        Some(ExactStealSection::Unavailable { reason }) => {
            let why = format!(
                "not measured ({reason}); steal: {}",
                route.unwrap_or_default()
            );
            return svg::no_data(ID, TITLE, &why);
        }
        None => {
            let why = route.unwrap_or_else(|| "the snapshot holds no exact steal".into());
            return svg::no_data(ID, TITLE, &why);
        }
    };
    let listed = t.steal_episodes.len();
    let caption = format!(
        "{}. Steal: {}. {listed} episodes listed{}; red: a task lost the time (busy steal), grey: the CPU was idle (idle steal); height: the episode's length, 1 µs to 100 ms on a log scale.",
        m.headline,
        route.as_deref().unwrap_or("exact, over the snapshot's interval"),
        if listed > MAX_MARKS { format!(" (the {MAX_MARKS} longest drawn)") } else { String::new() },
    );
    svg::figure(
        ID,
        TITLE,
        &caption,
        html! {
            (cpu_table(m))
            @if listed > 0 {
                (marks(t, m, wall_s))
                h3 { "Largest episodes" }
                (largest(t, &m.victims))
            }
        },
    )
}
