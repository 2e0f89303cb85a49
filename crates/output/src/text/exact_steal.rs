//! `report`'s exact steal of a recording (issue 30): which route measured
//! steal and why, per CPU the totals with the busy/idle split and the
//! episodes over 1 and 10 ms, and the largest listed episodes with their
//! time and victim.

use super::layout::Style;
use std::fmt::Write;
use stealscope_analysis::exact_steal::{ExactStealSection, Measured, Victim};
use stealscope_analysis::DoctorReport;
use stealscope_model::timeline::{StealMark, Timeline};

/// Largest episodes listed.
pub const LARGEST: usize = 10;

/// Who an episode hit: "postgres (pid 812)", its thread's name beside
/// when the process (named at the checkpoint, `procs`) is called
/// otherwise ("rustc (pid 1721, thread opt 6lpe3l)"), or idle.
pub fn victim(m: &StealMark, procs: &[Victim]) -> String {
    let Some(v) = &m.victim else {
        return "idle (the vCPU waited to be woken)".into();
    };
    match procs.iter().find(|p| p.pid == v.pid && p.comm != v.comm) {
        Some(p) => format!("{} (pid {}, thread {})", p.comm, v.pid, v.comm),
        None => format!("{} (pid {})", v.comm, v.pid),
    }
}

fn cpu_table(out: &mut String, m: &Measured) {
    let _ = writeln!(
        out,
        "\n  CPU  steal%   busy ms   idle ms  episodes  >1 ms  >10 ms    max ms"
    );
    for c in &m.cpus {
        let _ = writeln!(
            out,
            "  {:>3}  {:>6.3}  {:>8.3}  {:>8.3}  {:>8}  {:>5}  {:>6}  {:>8.3}",
            c.cpu, c.steal_pct, c.busy_ms, c.idle_ms, c.episodes, c.over_1ms, c.over_10ms, c.max_ms
        );
    }
}

fn largest(out: &mut String, st: &Style, t: &Timeline, procs: &[Victim]) {
    let top = t.largest_steal(LARGEST);
    if top.is_empty() {
        let _ = writeln!(out, "  no episode at or over the listing threshold");
        return;
    }
    let _ = writeln!(
        out,
        "\n  {} ({} listed):",
        st.bold("Largest episodes"),
        t.steal_episodes.len()
    );
    if let Some(k) = top
        .iter()
        .find_map(|m| Some(m.kvmclock_ns? as f64 / 1e9 - m.t_s))
    {
        // One line, not a column: the time line's origin on kvm-clock.
        let _ = writeln!(
            out,
            "  (+0 s is kvm-clock {k:.6} s: this VM's clock on its host)"
        );
    }
    for m in top {
        let _ = writeln!(
            out,
            "  {:>10}  cpu{:<3} {:>9.3} ms  {}",
            format!("+{:.3} s", m.t_s),
            m.cpu,
            m.ns as f64 / 1e6,
            victim(m, procs)
        );
    }
}

/// The section; nothing for a snapshot (no route on its time line).
pub fn section(out: &mut String, st: &Style, r: &DoctorReport, t: &Timeline) {
    let Some(route) = &t.steal else { return };
    out.push('\n');
    st.wrap(
        out,
        &format!("{}: ", st.bold("Steal route")),
        &route.describe(),
    );
    match &r.exact_steal {
        Some(ExactStealSection::Measured(m)) => {
            cpu_table(out, m);
            largest(out, st, t, &m.victims);
        }
        Some(ExactStealSection::Unavailable { reason }) => {
            st.wrap(out, "  exact steal not measured: ", reason);
        }
        None => {}
    }
}
