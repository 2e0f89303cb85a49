//! Text for `place plan` and `place apply|undo`: each VM with its reasons,
//! each action with its reason and the value it replaces; `move-memory`.

use std::fmt::Write as _;
use stealscope_actuators::memory::MoveReport;
use stealscope_actuators::ApplyReport;
use stealscope_placement::{Plan, VmPlan};
use stealscope_readers::cpulist::format as cpulist;

fn vm_line(out: &mut String, v: &VmPlan) {
    let node = v
        .node
        .map_or("spans nodes".to_string(), |n| format!("node {n}"));
    let mem = v
        .mem_bytes
        .map_or("memory ?".to_string(), |b| format!("{} MiB", b >> 20));
    let _ = writeln!(
        out,
        "  {} (pid {}): {:?}, {node}, demand {:.2} CPUs, {mem}",
        v.name, v.pid, v.class, v.demand
    );
    for (i, tid, cpus) in &v.vcpus {
        let _ = writeln!(
            out,
            "      vCPU {i:<3} tid {tid:<8} -> CPUs {}",
            cpulist(cpus)
        );
    }
    if !v.other_cpus.is_empty() {
        let _ = writeln!(
            out,
            "      other threads    -> CPUs {}",
            cpulist(&v.other_cpus)
        );
    }
    for r in &v.reasons {
        let _ = writeln!(out, "      why: {r}");
    }
}

pub fn plan(p: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Placement plan: {} VM(s), {} action(s)",
        p.vms.len(),
        p.actions.len()
    );
    for v in &p.vms {
        vm_line(&mut out, v);
    }
    // One paragraph per pinned pool, however many VMs and actions it covers.
    let mut maps: Vec<&str> = Vec::new();
    for m in p.vms.iter().filter_map(|v| v.mapping.as_deref()) {
        if !maps.contains(&m) {
            maps.push(m);
        }
    }
    if !maps.is_empty() {
        let _ = writeln!(out, "\nvCPU mapping:");
        for m in maps {
            let _ = writeln!(out, "  {m}");
        }
    }
    if !p.node_pressure.is_empty() {
        let load: Vec<String> = p
            .node_pressure
            .iter()
            .map(|(n, l)| format!("node {n}: {l:.2}"))
            .collect();
        let _ = writeln!(out, "\nShared load per pool CPU: {}", load.join(", "));
    }
    if !p.actions.is_empty() {
        let _ = writeln!(out, "\nActions, in order:");
        for (i, a) in p.actions.iter().enumerate() {
            let _ = writeln!(out, "  {:>3}. {a}\n       why: {}", i + 1, a.reason());
        }
    }
    for w in &p.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if let Some(r) = &p.refused {
        let _ = writeln!(out, "REFUSED: {r}");
    }
    out
}

pub fn apply_report(r: &ApplyReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}{} action(s)",
        if r.dry_run {
            "Dry run (add --yes to apply): ".to_string()
        } else {
            format!("Batch {}: ", r.batch.unwrap_or(0))
        },
        r.results.len()
    );
    for x in &r.results {
        let _ = write!(out, "  [{}] {}", x.outcome, x.action);
        if let Some(n) = &x.note {
            let _ = write!(out, " - {n}");
        }
        let _ = writeln!(out);
    }
    // One line per VM that went away, so a destroyed domain is said once.
    let mut gone: Vec<(&str, u32)> = Vec::new();
    for x in r.results.iter().filter(|x| x.outcome == "gone") {
        let k = (x.action.vm(), x.action.pid());
        if !gone.contains(&k) {
            gone.push(k);
        }
    }
    for (vm, pid) in gone {
        let of = |o: &str| {
            r.results
                .iter()
                .filter(|x| x.action.pid() == pid && x.outcome == o)
                .count()
        };
        let _ = writeln!(
            out,
            "gone: {vm} (pid {pid}) is no longer running: {} of its action(s) skipped, {} done before it went",
            of("gone"),
            of("done")
        );
    }
    if let Some(e) = &r.error {
        let _ = writeln!(out, "error: {e}");
    }
    out
}

/// `place apply` without --yes: the plan it would apply, then what each
/// action would replace (JSON: the report with the plan in it).
pub fn dry_run(p: &Plan, r: &ApplyReport, json: bool) -> String {
    if json {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v["plan"] = serde_json::to_value(p).unwrap_or_default();
        crate::json::render(&v)
    } else {
        format!("{}\n{}", plan(p), apply_report(r))
    }
}

/// `place move-memory`: one line, what moved (or would) and why it stopped.
pub fn move_report(r: &MoveReport, dry_run: bool) -> String {
    format!(
        "{} pid {}: {} MiB to node {} in {} step(s){}",
        if dry_run {
            "would move (dry run)"
        } else {
            "moved"
        },
        r.pid,
        r.moved_bytes >> 20,
        r.to_node,
        r.steps,
        r.stopped
            .as_deref()
            .map(|s| format!("; stopped: {s}"))
            .unwrap_or_default()
    )
}
