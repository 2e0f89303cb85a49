//! "Who stole it over time" in text (`report FILE` without `-o`): per VM,
//! its largest culprits over the recording, then a row per time bin with
//! the vCPUs waiting and each culprit's share of that wait. The summary is
//! `who_time::for_report`'s: at most 4 culprits and 12 bins, so that it
//! fits 80 columns and one screen per VM.

use super::layout::Style;
use super::who::{cut, label};
use crate::who_time::VmOverTime;
use std::fmt::Write;

const COL_W: usize = 10;

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
            .map(|c| format!("{} {:.0}%", label(&c.kind, &c.name, None), 100.0 * c.share))
            .collect();
        if v.other_s > 0.0 {
            whole.push(format!(
                "other {:.0}%",
                100.0 * v.other_s / v.wait_s.max(1e-12)
            ));
        }
        let head = format!("  {} waited {:.2} s: ", cut(&v.vm, 24), v.wait_s);
        st.items(out, &head, &whole, ", ");
        if v.bins.is_empty() {
            continue;
        }
        let _ = write!(out, "  {:>8} {:>6}", "from", "vCPUs");
        for c in &v.culprits {
            let _ = write!(
                out,
                " {:>COL_W$}",
                cut(&label(&c.kind, &c.name, None), COL_W)
            );
        }
        let _ = writeln!(out, " {:>COL_W$}", "other");
        for b in &v.bins {
            let _ = write!(
                out,
                "  {:>8} {:>6.2}",
                secs(b.start_s),
                b.wait_s / b.width_s.max(1e-12)
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
