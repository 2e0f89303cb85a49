//! "Who stole it over time" in text (`report FILE` without `-o`): per VM,
//! its largest culprits over the recording, then a row per time bin with
//! the vCPUs waiting and each culprit's share of that wait. The summary is
//! `who_time::for_report`'s: at most 4 culprits and 12 bins, so that it
//! fits 80 columns and one screen per VM.

use super::layout::Style;
use super::who::{cut, label};
use crate::who_time::VmOverTime;
use std::fmt::Write;
use stealscope_findings::units::fixed;

const COL_W: usize = 10;

/// A bin whose waiting vCPUs print as 0.00 (two decimals) waited nothing
/// worth a row.
const QUIET_VCPUS: f64 = 0.005;

/// A VM none of whose bins had vCPUs waiting: one line, not a table of
/// zeros.
fn quiet(v: &VmOverTime) -> bool {
    v.bins
        .iter()
        .all(|b| b.wait_s / b.width_s.max(1e-12) < QUIET_VCPUS)
}

fn secs(s: f64) -> String {
    if s < 60.0 {
        format!("+{s:.1}s")
    } else if s < 3600.0 {
        format!("+{:.1}m", s / 60.0)
    } else {
        format!("+{:.2}h", s / 3600.0)
    }
}

/// `attributed`: whether the whole-recording "Who stole it" above had the
/// collector's reading (the checkpoints of a recording from before they
/// carried it have none, while its host scans do: said here, or the two
/// sections seem to disagree).
pub(crate) fn section(out: &mut String, st: &Style, vms: &[VmOverTime], attributed: bool) {
    let bin = vms.iter().find_map(|v| v.bins.first()).map(|b| b.width_s);
    let _ = writeln!(
        out,
        "\n{} each VM's vCPU wait by culprit{}",
        st.bold("Who stole it over time:"),
        bin.map(|w| format!(", bins of {w:.1} s"))
            .unwrap_or_default()
    );
    if vms.is_empty() {
        st.wrap(
            out,
            "  ",
            "the recording carries no culprits (no VMs, or no scheduler-event collector)",
        );
        return;
    }
    if !attributed {
        st.wrap(
            out,
            "  ",
            "from the scheduler-event collector's reading at each host scan (the \
             recording's checkpoints, which the figures above come from, hold none)",
        );
    }
    for v in vms {
        let mut whole: Vec<String> = v
            .culprits
            .iter()
            .map(|c| format!("{} {:.0}%", label(&c.culprit), 100.0 * c.share))
            .collect();
        if v.other_s > 0.0 {
            whole.push(format!(
                "other {:.0}%",
                100.0 * v.other_s / v.wait_s.max(1e-12)
            ));
        }
        if quiet(v) {
            let _ = writeln!(
                out,
                "  {} waited {} s: no vCPU waited in any bin",
                cut(&v.vm, 24),
                fixed(v.wait_s, 2)
            );
            continue;
        }
        let head = format!("  {} waited {} s: ", cut(&v.vm, 24), fixed(v.wait_s, 2));
        st.items(out, &head, &whole, ", ");
        let _ = write!(out, "  {:>8} {:>6}", "from", "vCPUs");
        for c in &v.culprits {
            let _ = write!(out, " {:>COL_W$}", cut(&label(&c.culprit), COL_W));
        }
        let _ = writeln!(out, " {:>COL_W$}", "other");
        for b in &v.bins {
            let _ = write!(
                out,
                "  {:>8} {:>6}",
                secs(b.start_s),
                fixed(b.wait_s / b.width_s.max(1e-12), 2)
            );
            for s in &b.seconds {
                let cell = if b.wait_s > 0.0 {
                    format!("{:.0}%", 100.0 * s / b.wait_s)
                } else {
                    "-".to_string()
                };
                let _ = write!(out, " {cell:>COL_W$}");
            }
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::TextOpts;
    use crate::who_time::summarize;
    use stealscope_model::timeline::CulpritWindow;
    use stealscope_who::{Charge, Culprit, Kind};

    /// A busy VM keeps its table of bins; an idle one (its vCPUs hardly
    /// waited in any bin) is one line, not 12 rows of zeros.
    #[test]
    fn an_idle_vm_is_one_line() {
        let mut w = Vec::new();
        for t in 1..=24 {
            for (vm, s) in [("web", 0.9), ("idle", 0.000_1)] {
                w.push(CulpritWindow {
                    t_s: t as f64,
                    vm: vm.into(),
                    culprits: vec![Charge {
                        culprit: Culprit::new(Kind::HostProcess, "backup"),
                        seconds: s,
                        share: 1.0,
                    }],
                });
            }
        }
        let vms = summarize(&w, 4, 0.01, 12);
        let idle = vms.iter().find(|v| v.vm == "idle").unwrap();
        assert_eq!(idle.bins.len(), 12, "the summary keeps the bins");
        assert!(quiet(idle) && !quiet(vms.iter().find(|v| v.vm == "web").unwrap()));
        let st = Style::new(&TextOpts::plain());
        let mut out = String::new();
        section(&mut out, &st, &vms, true);
        let idle_lines: Vec<&str> = out.lines().filter(|l| l.contains("idle")).collect();
        assert_eq!(idle_lines.len(), 1, "{out}");
        assert!(idle_lines[0].contains("no vCPU waited in any bin"), "{out}");
        assert!(out.lines().count() >= 12 + 2, "web keeps its rows: {out}");
    }
}
