//! "Who stole it" in the text reports of `host` and `doctor`: each VM's top
//! culprits, and a victim x culprit table that fits 80 columns; without a
//! collector, the host's other runnable work and why nothing is attributed.

use super::layout::Style;
use std::collections::BTreeMap;
use std::fmt::Write;
use stealscope_analysis::report::WhoStole;
use stealscope_model::host::attribution::WaitBy;
use stealscope_model::host::VmSteal;

/// Culprit columns in the table (then "other").
const COLUMNS: usize = 4;
const NAME_W: usize = 15;
const COL_W: usize = 11;

pub(crate) fn label(kind: &str, name: &str, pid: Option<u32>) -> String {
    match kind {
        "vcpu" => format!("{name} vCPU"),
        "vmm" => format!("{name} VMM"),
        "host-process" => match pid {
            Some(p) => format!("{name}[{p}]"),
            None => name.to_string(),
        },
        "irq" => "irq".into(),
        _ => name.to_string(),
    }
}

pub(crate) fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(w - 1).collect();
        t.push('~');
        t
    }
}

/// A table column's head: a `comm[pid]` too wide for it keeps the comm
/// whole (or as much as fits) rather than a cut pid.
fn head(label: &str, w: usize) -> String {
    match label.split_once('[') {
        Some((name, _)) if label.chars().count() > w => cut(name, w),
        _ => cut(label, w),
    }
}

/// "  vm: waited 2.58 s for a 39%, b 30%, c 12%", its top three culprits
/// wrapped whole on indented lines when they do not fit.
fn vm_line(out: &mut String, st: &Style, name: &str, total: f64, rows: &[(String, f64)]) {
    let s: Vec<String> = rows
        .iter()
        .take(3)
        .map(|(l, s)| format!("{} {:.0}%", cut(l, 40), 100.0 * s / total))
        .collect();
    let lead = format!("  {}: waited {total:.2} s for ", cut(name, 24));
    st.items_hang(out, &lead, "    ", &s, ", ");
}

/// Sums a VM's vCPU rows by culprit label.
fn vm_rows(vm: &VmSteal) -> Vec<(String, f64)> {
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    for w in vm.vcpus.iter().flat_map(|c| &c.wait_by) {
        let WaitBy {
            kind, name, pid, ..
        } = w;
        *m.entry(label(kind, name, *pid)).or_default() += w.seconds;
    }
    let mut v: Vec<(String, f64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

pub(crate) fn who_stole(who: &WhoStole, vms: &[VmSteal], st: &Style) -> String {
    let bold = |x: &str| st.bold(x);
    let mut out = String::new();
    let a = &who.attribution;
    if a.route == "none" {
        let _ = writeln!(
            out,
            "\n{} estimated from run times, no attribution:",
            bold("Who stole it:")
        );
        let _ = writeln!(out, "  {}", a.reason);
    } else {
        let lost = a
            .lost_events
            .filter(|&l| l > 0)
            .map(|l| format!(", {l} events lost"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "\n{} attributed by {} from {} scheduler events{lost}",
            bold("Who stole it:"),
            a.route,
            a.events.unwrap_or(0)
        );
        // A line of its own: it never fits beside the events at 80 columns.
        if let Some(m) = a.missed_switches.filter(|&m| m > 0) {
            let _ = writeln!(
                out,
                "  {m} switches missing from the trace: their wait is charged as unknown"
            );
        }
        if let Some(o) = a.overflows.filter(|&o| o > 0) {
            let _ = writeln!(
                out,
                "  {o} waits longer than the per-CPU record: charged as unknown"
            );
        }
        for f in &a.fallbacks {
            let _ = writeln!(out, "  not used: {f}");
        }
    }
    let hw = &who.host_work;
    let top: Vec<String> = hw
        .top
        .iter()
        .take(4)
        .map(|w| format!("{} {:.2}", label(w.kind, &w.name, w.pid), w.run_cpus))
        .collect();
    // Items wrap whole: four long comms with pids ran past 80 columns.
    let lead = format!(
        "  other host work ran {:.2} CPUs{}",
        hw.run_cpus,
        if top.is_empty() { "" } else { ": " }
    );
    if top.is_empty() {
        let _ = writeln!(out, "{lead}");
    } else {
        st.items(&mut out, &lead, &top, ", ");
    }
    if who.culprits.is_empty() {
        return out;
    }
    // Per VM: its top culprits.
    for vm in vms {
        let rows = vm_rows(vm);
        let total: f64 = rows.iter().map(|r| r.1).sum();
        if total > 0.0 {
            vm_line(&mut out, st, &vm.name, total, &rows);
        }
    }
    // Victim x culprit, seconds.
    let cols: Vec<String> = who
        .culprits
        .iter()
        .take(COLUMNS)
        .map(|c| label(c.kind, &c.name, c.pid))
        .collect();
    let _ = write!(out, "\n  {:<NAME_W$}", "victim \\ by (s)");
    for c in &cols {
        let _ = write!(out, " {:>COL_W$}", head(c, COL_W));
    }
    let _ = writeln!(out, " {:>COL_W$}", "other");
    for vm in vms {
        let rows = vm_rows(vm);
        if rows.is_empty() {
            continue;
        }
        let _ = write!(out, "  {:<NAME_W$}", cut(&vm.name, NAME_W));
        let mut shown = 0.0;
        for c in &cols {
            let s = rows.iter().find(|r| &r.0 == c).map_or(0.0, |r| r.1);
            shown += s;
            let _ = write!(out, " {:>COL_W$.2}", s);
        }
        let rest: f64 = rows.iter().map(|r| r.1).sum::<f64>() - shown;
        let _ = writeln!(out, " {:>COL_W$.2}", rest.max(0.0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::TextOpts;

    #[test]
    fn column_heads_keep_the_name_not_a_cut_pid() {
        assert_eq!(head("noisyloop[24122]", 11), "noisyloop");
        assert_eq!(head("migrating_victim[24247]", 11), "migrating_~");
        assert_eq!(head("nvA vCPU", 11), "nvA vCPU");
        assert_eq!(head("burn[812]", 11), "burn[812]");
    }

    /// Long culprit names wrap whole, within 80 columns, in two lines
    /// rather than one a culprit.
    #[test]
    fn a_vms_culprits_wrap_whole_at_80_columns() {
        let st = Style::new(&TextOpts::plain());
        let rows: Vec<(String, f64)> = ["stl-hog-a[23598]", "stl-victim2[23598]", "nvA vCPU"]
            .iter()
            .zip([0.7, 0.68, 0.46])
            .map(|(l, s)| (l.to_string(), s))
            .collect();
        let mut out = String::new();
        vm_line(&mut out, &st, "a-rather-long-vm-name-01", 2.87, &rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{out}");
        for (l, _) in &rows {
            assert!(out.contains(l.as_str()), "{l} cut in {out}");
        }
    }
}
