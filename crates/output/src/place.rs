//! Text for `place plan` and `place apply|undo`: each VM with its reasons,
//! each action with its reason and the value it replaces, the simulator's
//! prediction; `move-memory`. Lines wrap at [`width`] (continuations
//! indented under their first word).

use crate::text::layout::{Style, TextOpts};
use std::fmt::Write as _;
use stealscope_actuators::memory::MoveReport;
use stealscope_actuators::ApplyReport;
use stealscope_placement::{Plan, VmPlan};
use stealscope_readers::cpulist::format as cpulist;
use stealscope_sim::predict::Prediction;

/// Columns `place` lays its text out in: $COLUMNS, else the terminal's
/// width, else 80.
pub fn width() -> usize {
    crate::text::layout::stdout_width()
}

fn style(width: usize) -> Style {
    Style::new(&TextOpts {
        width,
        ..TextOpts::plain()
    })
}

fn vm_line(out: &mut String, st: &Style, v: &VmPlan) {
    let node = v
        .node
        .map_or("spans nodes".to_string(), |n| format!("node {n}"));
    let mem = v
        .mem_bytes
        .map_or("memory ?".to_string(), |b| format!("{} MiB", b >> 20));
    st.wrap_hang(
        out,
        "  ",
        "      ",
        &format!(
            "{} (pid {}): {:?}, {node}, demand {:.2} CPUs, {mem}",
            v.name, v.pid, v.class, v.demand
        ),
    );
    for (i, tid, cpus) in &v.vcpus {
        st.wrap(
            out,
            "      ",
            &format!("vCPU {i:<3} tid {tid:<8} -> CPUs {}", cpulist(cpus)),
        );
    }
    if !v.other_cpus.is_empty() {
        st.wrap(
            out,
            "      ",
            &format!("other threads    -> CPUs {}", cpulist(&v.other_cpus)),
        );
    }
    for r in &v.reasons {
        st.wrap(out, "      why: ", r);
    }
}

/// The prediction's lines: the measures now and planned, and what is
/// predicted worse (which `apply` refuses without --force).
pub(crate) fn prediction(out: &mut String, st: &Style, pr: &Prediction) {
    // A line never breaks inside a measure's "a -> b".
    st.items(out, "predicted: ", &pr.measures(), ", ");
    if !pr.worse.is_empty() {
        st.wrap(
            out,
            "warning: predicted worse: ",
            &format!(
                "{} (`place apply` refuses this plan without --force)",
                pr.worse.join("; ")
            ),
        );
    }
}

/// `place plan`: the VMs, the mapping, the actions, the prediction, laid
/// out in `width` columns.
pub fn plan(p: &Plan, pred: Option<&Prediction>, width: usize) -> String {
    let st = style(width);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Placement plan: {} VM(s), {} action(s)",
        p.vms.len(),
        p.actions.len()
    );
    for v in &p.vms {
        vm_line(&mut out, &st, v);
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
            st.wrap(&mut out, "  ", m);
        }
    }
    if !p.node_pressure.is_empty() {
        let load: Vec<String> = p
            .node_pressure
            .iter()
            .map(|(n, l)| format!("node {n}: {l:.2}"))
            .collect();
        let _ = writeln!(out);
        st.items(&mut out, "Shared load per pool CPU: ", &load, ", ");
    }
    if !p.actions.is_empty() {
        let _ = writeln!(out, "\nActions, in order:");
        for (i, a) in p.actions.iter().enumerate() {
            st.wrap(&mut out, &format!("  {:>3}. ", i + 1), &a.to_string());
            st.wrap(&mut out, "       why: ", a.reason());
        }
    }
    if let Some(pr) = pred {
        let _ = writeln!(out);
        prediction(&mut out, &st, pr);
    }
    for w in &p.warnings {
        st.wrap(&mut out, "warning: ", w);
    }
    if let Some(r) = &p.refused {
        st.wrap(&mut out, "REFUSED: ", r);
    }
    out
}

/// `place apply|undo`: each action with its outcome, in `width` columns.
pub fn apply_report(r: &ApplyReport, width: usize) -> String {
    let st = style(width);
    let mut out = String::new();
    if !r.dry_run && r.batch.is_none() {
        out.push_str("Nothing applied: the plan has no actions\n");
        return out;
    }
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
        let note = x
            .note
            .as_deref()
            .map(|n| format!(" - {n}"))
            .unwrap_or_default();
        st.wrap_hang(
            &mut out,
            &format!("  [{}] ", x.outcome),
            "      ",
            &format!("{}{note}", x.action),
        );
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
        st.wrap(
            &mut out,
            "gone: ",
            &format!(
                "{vm} (pid {pid}) is no longer running: {} of its action(s) skipped, {} done before it went",
                of("gone"),
                of("done")
            ),
        );
    }
    if let Some(e) = &r.error {
        st.wrap(&mut out, "error: ", e);
    }
    out
}

/// `place apply` without --yes: the plan it would apply, then what each
/// action would replace (JSON: the report with the plan and the
/// prediction in it).
pub fn dry_run(
    p: &Plan,
    pred: Option<&Prediction>,
    r: &ApplyReport,
    json: bool,
    width: usize,
) -> String {
    if json {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v["plan"] = serde_json::to_value(p).unwrap_or_default();
        if let Some(pr) = pred {
            v["prediction"] = serde_json::to_value(pr).unwrap_or_default();
        }
        crate::json::render(&v)
    } else {
        format!("{}\n{}", plan(p, pred, width), apply_report(r, width))
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

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_placement::{Action, Knob};
    use textwrap::core::display_width;

    fn long_plan() -> Plan {
        let why =
            "its vCPUs waited 48% of the time, 97% of it behind host process `backup` (pid 812), \
                   and the node has room for its memory and its demand of 2.00 CPUs";
        let mut p = Plan::default();
        p.vms.push(VmPlan {
            pid: 4242,
            name: "a-rather-long-virtual-machine-name".into(),
            class: stealscope_placement::plan::Class::Shared,
            node: Some(0),
            demand: 2.0,
            mem_bytes: Some(1 << 30),
            vcpus: vec![(0, 4243, vec![0, 1])],
            other_cpus: vec![0, 1],
            reasons: vec![why.into(); 2],
            mapping: Some(why.repeat(2)),
            spill: None,
        });
        p.actions.push(Action::Affinity {
            vm: "a-rather-long-virtual-machine-name".into(),
            pid: 4242,
            tid: 4243,
            vcpu: Some(0),
            cpus: vec![1],
            from: vec![0, 1],
            via: Knob::Direct,
            reason: why.into(),
        });
        p.warnings.push(why.repeat(3));
        p
    }

    #[test]
    fn plan_text_wraps_at_the_width_it_is_given() {
        for width in [60, 80, 120] {
            let t = plan(&long_plan(), None, width);
            for l in t.lines() {
                assert!(display_width(l) <= width, "{width}: {l:?}");
            }
            // Nothing is lost: every reason's last words are there.
            assert!(t.contains("2.00 CPUs"), "{t}");
        }
    }

    #[test]
    fn the_prediction_breaks_lines_only_between_measures() {
        use stealscope_sim::predict::{Measures, Prediction};
        let m = |x: f64| Measures {
            mean_steal_pct: x,
            p99_vm_steal_pct: x,
            host_steal_pct: x,
            host_cpus: x,
            ..Measures::default()
        };
        let pr = Prediction {
            current: m(0.0),
            planned: m(12.345),
            noise: Measures::default(),
            seeds: vec![1, 2, 3],
            history_s: 60.0,
            throughput_change_pct: -3.0,
            worse: Vec::new(),
            vms: Vec::new(),
            host_work: Vec::new(),
        };
        for width in [60, 80, 120] {
            let t = plan(&Plan::default(), Some(&pr), width);
            let lines: Vec<&str> = t.lines().collect();
            for want in pr.measures() {
                assert!(
                    lines.iter().any(|l| l.contains(&want)),
                    "{width}: {want:?} in\n{t}"
                );
            }
            assert!(
                lines.iter().all(|l| display_width(l) <= width),
                "{width}:\n{t}"
            );
        }
    }
}
