//! The verdict: one or two lines that open every report (doctor, host, the
//! HTML page, top's header) saying what is wrong and what to do. Computed
//! here once from the ranked findings, whatever finding is on top, so every
//! view says the same thing.

use crate::finding::{Evidence, Finding, Severity};
use serde::Serialize;

/// Evidence key of a fix that names what this finding's measure found
/// (the host process to move first): the verdict prefers it to the
/// finding's generic short fix.
pub const VERDICT_FIX: &str = "verdict_fix";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// "ok" (no finding), "info" (nothing needs action), "warning",
    /// "critical", or "cut-off" (the file is cut off: [`of_damaged`]).
    pub status: &'static str,
    /// The id of the finding the verdict names; absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finding: Option<String>,
    /// What is wrong, in one sentence.
    pub headline: String,
    /// What to do about it; absent when nothing needs doing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Other findings of warning severity or worse.
    pub more: usize,
}

/// What a person reads before the id: the area the finding is about.
fn area(id: &str) -> &'static str {
    const AREAS: &[(&str, &str)] = &[
        ("host.steal.", "Host CPU contention"),
        ("host.", "Host"),
        ("steal.", "CPU steal"),
        ("jitter.", "Latency"),
        ("idle.", "Idle"),
        ("clock.", "Clock"),
        ("mitigation.", "CPU mitigation"),
        ("irq.", "Interrupts"),
        ("tuning.", "Tuning"),
    ];
    AREAS
        .iter()
        .find(|(p, _)| id.starts_with(p))
        .map_or("Finding", |(_, a)| a)
}

/// A short fix for findings whose remedy opens with an explanation; the
/// others take the remedy's first sentence that names a command.
fn short_fix(id: &str) -> Option<&'static str> {
    Some(match id {
        "host.steal.busy" => {
            "move the busiest VMs (or load) to another host, or give busy VMs fewer vCPUs"
        }
        "host.steal.idle" | "host.idle-vm-penalty" | "host.cgroup-weight-unfair" => {
            "`stealscope place plan` shows a placement that removes it; `stealscope place apply --yes` applies it (reversible)"
        }
        "host.vm-spans-nodes" => "keep each VM inside one NUMA node: `stealscope place plan`",
        "host.numa-balancing" => {
            "`sysctl -w kernel.numa_balancing=0` and place VMs per node (`stealscope place plan`)"
        }
        "host.swap-pressure" => "reduce host memory overcommit until the VMs' memory is back in RAM",
        "host.starved" => {
            "give the starved task a CPU of its own or lower what holds its CPU (`taskset -pc`, /proc/PID/autogroup or `renice`, cpu.weight)"
        }
        "steal.busy" => {
            "ask the provider to move the VM to a less loaded host or a dedicated instance type"
        }
        "steal.idle" => {
            "send this report to the provider (host placement); on your own KVM host run `stealscope host`"
        }
        "steal.bursty" => {
            "alert on short-window steal; for latency-sensitive work ask for dedicated vCPUs"
        }
        "steal.ipc-collapse" => {
            "a dedicated-core instance, or on your own host each vCPU pinned to its own core"
        }
        "mitigation.kpti-without-pcid" => {
            "ask the provider to expose PCID to the VM (QEMU `-cpu host` or `+pcid`)"
        }
        _ => return None,
    })
}

/// The remedy's first sentence with a `command`, else its first sentence.
fn fix_from_remedy(remedy: &str) -> Option<String> {
    let sentences: Vec<&str> = remedy
        .split_inclusive(". ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let pick = sentences
        .iter()
        .find(|s| s.contains('`'))
        .or_else(|| sentences.first())?;
    Some(pick.trim_end_matches('.').to_string())
}

/// The verdict of findings ranked most severe first.
pub fn of(findings: &[Finding]) -> Verdict {
    let Some(top) = findings.first() else {
        return Verdict {
            status: "ok",
            finding: None,
            headline: "No problem found: no known cause of steal or jitter is present".into(),
            fix: None,
            more: 0,
        };
    };
    let serious = findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .count();
    if top.severity < Severity::Warning {
        let n = findings.len();
        return Verdict {
            status: "info",
            finding: Some(top.id.clone()),
            headline: format!(
                "Nothing needs action: {n} informational finding{} ({})",
                if n == 1 { "" } else { "s" },
                top.title
            ),
            fix: None,
            more: 0,
        };
    }
    Verdict {
        status: top.severity.as_str(),
        finding: Some(top.id.clone()),
        // The title's first clause: the rest (who ran, the split) is in the
        // finding below, and the verdict must stay two or three lines.
        headline: format!("{}: {}", area(&top.id), first_clause(&top.title)),
        fix: top
            .evidence
            .get(VERDICT_FIX)
            .and_then(Evidence::as_str)
            .map(String::from)
            .or_else(|| short_fix(&top.id).map(String::from))
            .or_else(|| fix_from_remedy(&top.remedy)),
        more: serious - 1,
    }
}

/// A title's first clause: up to the first "; " outside parentheses (one
/// inside a figure's parenthesis would leave it open).
fn first_clause(title: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in title.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ';' if depth <= 0 && title[i..].starts_with("; ") => return &title[..i],
            _ => {}
        }
    }
    title
}

/// The verdict of a file cut off or damaged: the cut takes the verdict's
/// place, since findings of a partial file are not the whole capture's
/// (issue 28); the findings are still listed below it.
pub fn of_damaged(d: &stealscope_readers::damage::Damage, findings: &[Finding]) -> Verdict {
    Verdict {
        status: CUT_OFF,
        finding: None,
        headline: d.headline(),
        fix: Some(
            "read the findings below as of that part only; take the capture again for a whole one"
                .into(),
        ),
        more: findings
            .iter()
            .filter(|f| f.severity >= Severity::Warning)
            .count(),
    }
}

/// The status of a verdict on a cut-off or damaged file.
pub const CUT_OFF: &str = "cut-off";

/// The verdict of a report: the cut when the file is damaged, else the top finding's.
pub fn of_report(
    damage: Option<&stealscope_readers::damage::Damage>,
    findings: &[Finding],
) -> Verdict {
    match damage {
        Some(d) => of_damaged(d, findings),
        None => of(findings),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_first_clause_ends_outside_parentheses() {
        assert_eq!(first_clause("a (b; c) d; e"), "a (b; c) d");
        assert_eq!(first_clause("a; b"), "a");
        assert_eq!(first_clause("no clause"), "no clause");
    }

    use super::*;

    #[test]
    fn names_the_top_finding_and_its_fix() {
        let f = vec![
            Finding::new("host.no-ept", Severity::Critical, "EPT is off").remedy(
                "Without EPT every fault exits. Remove `ept=0` from the command line. Then reboot.",
            ),
            Finding::new("tuning.io-scheduler", Severity::Info, "elevator"),
        ];
        let v = of(&f);
        assert_eq!(v.status, "critical");
        assert_eq!(v.finding.as_deref(), Some("host.no-ept"));
        assert_eq!(v.headline, "Host: EPT is off");
        assert_eq!(
            v.fix.as_deref(),
            Some("Remove `ept=0` from the command line")
        );
        assert_eq!(v.more, 0);
    }

    #[test]
    fn nothing_or_only_info_needs_no_action() {
        assert_eq!(of(&[]).status, "ok");
        let v = of(&[Finding::new(
            "tuning.io-scheduler",
            Severity::Info,
            "elevator",
        )]);
        assert_eq!(v.status, "info");
        assert!(v.fix.is_none() && v.headline.starts_with("Nothing needs action"));
    }
}
