//! "Who stole it" in the text reports of `host` and `doctor`: each VM's top
//! culprits, and a victim x culprit table that fits 80 columns; without a
//! collector, the host's other runnable work and why nothing is attributed.

use crate::text::layout::Style;
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
        if total <= 0.0 {
            continue;
        }
        let s: Vec<String> = rows
            .iter()
            .take(3)
            .map(|(l, s)| format!("{l} {:.0}%", 100.0 * s / total))
            .collect();
        let line = format!(
            "  {}: waited {total:.2} s for {}",
            cut(&vm.name, 24),
            s.join(", ")
        );
        if line.chars().count() <= 78 {
            let _ = writeln!(out, "{line}");
        } else {
            // Long names: the culprits on lines of their own.
            let _ = writeln!(out, "  {}: waited {total:.2} s for", cut(&vm.name, 24));
            for c in &s {
                let _ = writeln!(out, "    {}", cut(c, 74));
            }
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
        let _ = write!(out, " {:>COL_W$}", cut(c, COL_W));
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
