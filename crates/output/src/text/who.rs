//! "Who stole it" in the text reports of `host` and `doctor`: each VM's top
//! culprits, and a victim x culprit table that fits 80 columns; without a
//! collector, the host's other runnable work and why nothing is attributed.

use super::layout::Style;
use std::collections::BTreeMap;
use std::fmt::Write;
use stealscope_analysis::report::{OpenWait, WhoStole};
use stealscope_findings::units::fixed;
use stealscope_model::host::attribution::{AttributionStatus, CulpritShare};
use stealscope_model::host::host_work::OwnCost;
use stealscope_model::host::VmSteal;
use stealscope_who::{Culprit, Kind};

/// Culprit columns in the table (then "other").
const COLUMNS: usize = 4;
const NAME_W: usize = 15;
const COL_W: usize = 11;

pub(crate) fn label(c: &Culprit) -> String {
    let name = &c.name;
    match c.kind {
        Kind::Vcpu => format!("{name} vCPU"),
        Kind::Vmm => format!("{name} VMM"),
        Kind::HostProcess => match c.pid {
            Some(p) => format!("{name}[{p}]"),
            None => name.to_string(),
        },
        Kind::Irq => "irq".into(),
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
    let lead = format!("  {}: waited {} s for ", cut(name, 24), fixed(total, 2));
    st.items_hang(out, &lead, "    ", &s, ", ");
}

/// Sums a VM's vCPU rows by culprit label (stealscope's own threads left
/// out: they are its cost, said once by [`own_line`]).
fn vm_rows(vm: &VmSteal) -> Vec<(String, f64)> {
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    for w in vm
        .vcpus
        .iter()
        .flat_map(|c| &c.wait_by)
        .filter(|w| w.culprit.kind != Kind::Own)
    {
        *m.entry(label(&w.culprit)).or_default() += w.seconds;
    }
    let mut v: Vec<(String, f64)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// "Who stole it:" and how: the route and its events, what it missed, the
/// routes not used; or why nothing attributed.
fn attribution_lines(out: &mut String, st: &Style, a: &AttributionStatus) {
    let bold = |x: &str| st.bold(x);
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
}

pub(crate) fn who_stole(who: &WhoStole, vms: &[VmSteal], st: &Style) -> String {
    let mut out = String::new();
    attribution_lines(&mut out, st, &who.attribution);
    let hw = &who.host_work;
    let top: Vec<String> = hw
        .top
        .iter()
        .take(4)
        .map(|w| format!("{} {}", label(&w.culprit), fixed(w.run_cpus, 2)))
        .collect();
    // Items wrap whole: four long comms with pids ran past 80 columns.
    let lead = format!(
        "  other host work ran {} CPUs{}",
        fixed(hw.run_cpus, 2),
        if top.is_empty() { "" } else { ": " }
    );
    if top.is_empty() {
        let _ = writeln!(out, "{lead}");
    } else {
        st.items(&mut out, &lead, &top, ", ");
    }
    if let Some(own) = &hw.own {
        st.wrap(&mut out, "  ", &own_line(own));
    }
    if let Some(w) = &who.open_waits {
        open_waits(&mut out, st, w);
    }
    if who.culprits.is_empty() {
        return out;
    }
    if st.verbose {
        threads(&mut out, st, &who.culprits);
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
        .map(|c| label(&c.charge.culprit))
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
            let _ = write!(out, " {:>COL_W$}", fixed(s, 2));
        }
        let rest: f64 = rows.iter().map(|r| r.1).sum::<f64>() - shown;
        let _ = writeln!(out, " {:>COL_W$}", fixed(rest.max(0.0), 2));
    }
    out
}

/// Open waits shown: the longest, the rest counted.
const OPEN_WAITS_SHOWN: usize = 4;

/// Runnable threads still queued at the end, not yet run: "open waits at
/// the end: backup[812] on CPU 0 queued 1.4 s behind qemu-system-x86[700]".
fn open_waits(out: &mut String, st: &Style, waits: &[OpenWait]) {
    if waits.is_empty() {
        let _ = writeln!(
            out,
            "  open waits at the end: none (every runnable thread ran within 0.25 s)"
        );
        return;
    }
    let items: Vec<String> = waits
        .iter()
        .take(OPEN_WAITS_SHOWN)
        .map(|o| {
            let w = &o.wait;
            let who = match &o.vm {
                Some(vm) => format!("{vm} `{}`", w.comm),
                None => format!("{}[{}]", w.process, w.pid),
            };
            let behind = w
                .holders
                .first()
                .map(|h| format!(" behind {}[{}]", h.process, h.pid))
                .unwrap_or_default();
            format!(
                "{who} on CPU {} queued {} s{behind}",
                w.cpu,
                fixed(w.waited_s, 1)
            )
        })
        .collect();
    let more = waits.len().saturating_sub(OPEN_WAITS_SHOWN);
    let lead = format!(
        "  open waits at the end ({} runnable, not yet run{}): ",
        waits.len(),
        if more > 0 {
            format!("; {more} more in JSON")
        } else {
            String::new()
        }
    );
    st.items(out, &lead, &items, "; ");
}

/// stealscope's own cost, said once: it is no culprit and no host work.
pub(crate) fn own_line(own: &OwnCost) -> String {
    let wait = own
        .vcpu_wait_s
        .map(|w| format!(", vCPUs waited {} s behind its threads", fixed(w, 2)))
        .unwrap_or_default();
    format!(
        "stealscope itself (pid {}) ran {} CPUs{wait}: its own cost, left out of the culprits and host work",
        own.pid,
        fixed(own.run_cpus, 2)
    )
}

/// `-v`: the threads of each host-process culprit (it is named by its
/// process; these held the CPUs).
fn threads(out: &mut String, st: &Style, culprits: &[CulpritShare]) {
    for c in culprits
        .iter()
        .filter(|c| c.threads.len() > 1)
        .take(COLUMNS)
    {
        let items: Vec<String> = c
            .threads
            .iter()
            .map(|t| format!("{} {} s", t.comm, fixed(t.seconds, 2)))
            .collect();
        let lead = format!("  {} threads: ", label(&c.charge.culprit));
        st.items(out, &lead, &items, ", ");
    }
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

    /// With -v a culprit process lists its threads; stealscope's own cost
    /// is one line, and never a column or a VM's culprit.
    #[test]
    fn threads_with_v_and_its_own_cost_once() {
        use stealscope_model::host::attribution::ThreadShare;
        use stealscope_model::host::host_work::HostWork;
        let rustc = CulpritShare {
            charge: stealscope_who::Charge {
                culprit: Culprit {
                    pid: Some(700),
                    ..Culprit::new(Kind::HostProcess, "rustc")
                },
                seconds: 0.9,
                share: 0.9,
            },
            victims: vec!["web".into()],
            threads: vec![
                ThreadShare {
                    comm: "coordinator".into(),
                    seconds: 0.6,
                },
                ThreadShare {
                    comm: "lto cgu.05".into(),
                    seconds: 0.3,
                },
            ],
        };
        let who = WhoStole {
            attribution: bpf_status(),
            culprits: vec![rustc],
            host_work: HostWork {
                own: Some(OwnCost {
                    pid: 950,
                    run_cpus: 0.006,
                    vcpu_wait_s: Some(0.1),
                }),
                ..HostWork::default()
            },
            open_waits: None,
        };
        let verbose = Style::new(&TextOpts {
            verbose: true,
            ..TextOpts::plain()
        });
        let out = who_stole(&who, &[], &verbose);
        assert!(
            out.contains("rustc[700] threads: coordinator 0.60 s, lto cgu.05 0.30 s"),
            "{out}"
        );
        assert_eq!(
            out.matches("stealscope itself (pid 950)").count(),
            1,
            "{out}"
        );
        let brief = who_stole(&who, &[], &Style::new(&TextOpts::plain()));
        assert!(!brief.contains("coordinator"), "{brief}");
        assert!(
            brief.contains("stealscope itself (pid 950) ran 0.01 CPUs"),
            "{brief}"
        );
    }

    /// Open waits at the end: named with their CPU, how long and behind
    /// whom; "none" when the scanner saw none; nothing without a scanner.
    #[test]
    fn open_waits_at_the_end_are_listed() {
        use stealscope_analysis::report::OpenWait;
        use stealscope_model::host::host_work::HostWork;
        use stealscope_model::host::starve::{StoredHolder, StoredWait};
        let wait = |pid: u32, comm: &str, s: f64, vm: Option<&str>| OpenWait {
            wait: StoredWait {
                tid: pid,
                pid,
                comm: comm.into(),
                process: comm.into(),
                cpu: 0,
                cgroup: None,
                waited_s: s,
                since_s: Some(100.0),
                open: true,
                holders: vec![StoredHolder {
                    tid: 701,
                    pid: 700,
                    comm: "CPU 0/TCG".into(),
                    process: "qemu-system-x86".into(),
                    cpu_s: s,
                }],
            },
            vm: vm.map(str::to_string),
        };
        let who = |w: Option<Vec<OpenWait>>| WhoStole {
            attribution: bpf_status(),
            culprits: Vec::new(),
            host_work: HostWork::default(),
            open_waits: w,
        };
        let st = Style::new(&TextOpts::plain());
        let out = who_stole(
            &who(Some(vec![
                wait(812, "backup", 1.43, None),
                wait(901, "CPU 1/TCG", 0.3, Some("web")),
            ])),
            &[],
            &st,
        );
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("open waits at the end (2 runnable, not yet run): backup[812] on CPU 0 queued 1.4 s behind qemu-system-x86[700]; web `CPU 1/TCG` on CPU 0 queued 0.3 s"),
            "{out}"
        );
        assert!(out.lines().all(|l| l.chars().count() <= 80), "{out}");
        let none = who_stole(&who(Some(Vec::new())), &[], &st);
        assert!(none.contains("open waits at the end: none"), "{none}");
        let unscanned = who_stole(&who(None), &[], &st);
        assert!(!unscanned.contains("open waits"), "{unscanned}");
    }

    /// The BPF route with 10 events and nothing lost.
    fn bpf_status() -> AttributionStatus {
        AttributionStatus {
            route: "bpf",
            reason: String::new(),
            events: Some(10),
            lost_events: Some(0),
            missed_switches: None,
            overflows: None,
            fallbacks: Vec::new(),
        }
    }
}
