//! `stealscope_noisy_neighbor{culprit_kind,culprit,victims,severity}`: the
//! `host.noisy-neighbor` findings of `serve`'s latest rule run, each with
//! the share of other VMs' vCPU wait it caused. The alert
//! `StealscopeNoisyNeighbor` fires on it, so it fires exactly when the
//! rule does (its fair-share test and hysteresis included) and carries
//! the victims. Bounded: at most [`MAX_SERIES`] culprits, and the victims
//! label names at most [`MAX_VICTIMS`] VMs (then "+N more").

use stealscope_analysis::{Finding, Severity};
use stealscope_who::{Culprit, Kind};

/// Culprits exported per rule run (the largest shares).
pub const MAX_SERIES: usize = 5;
/// VMs named in one `victims` label.
pub const MAX_VICTIMS: usize = 3;

/// One noisy neighbour as exported.
#[derive(Debug, Clone, PartialEq)]
pub struct NoisyNeighbor {
    /// Kind and name, without the pid (the pid would make a series per
    /// restart).
    pub culprit: Culprit,
    /// "db,web" or "a,b,c,+2 more", in the finding's order.
    pub victims: String,
    pub severity: Severity,
    /// Share of the vCPU wait of other VMs it caused (0..1).
    pub share: f64,
}

/// The victims label: at most [`MAX_VICTIMS`] names.
fn victims_label(v: &[String]) -> String {
    let mut shown: Vec<String> = v.iter().take(MAX_VICTIMS).cloned().collect();
    if v.len() > MAX_VICTIMS {
        shown.push(format!("+{} more", v.len() - MAX_VICTIMS));
    }
    shown.join(",")
}

/// The exported set from a rule run's findings.
pub fn of(findings: &[Finding]) -> Vec<NoisyNeighbor> {
    let mut out: Vec<NoisyNeighbor> = findings
        .iter()
        .filter(|f| f.id == "host.noisy-neighbor")
        .filter_map(|f| {
            let c = f.evidence.get("culprit")?;
            let str_of = |k: &str| c.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let victims: Vec<String> = match f.evidence.get("victims") {
                Some(stealscope_findings::Evidence::List(l)) => l
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            };
            Some(NoisyNeighbor {
                culprit: Culprit::new(Kind::parse(&str_of("kind")?)?, str_of("name")?),
                victims: victims_label(&victims),
                severity: f.severity,
                share: f.evidence.get("share_of_vcpu_wait")?.as_f64()?,
            })
        })
        .collect();
    out.sort_by(|a, b| b.share.total_cmp(&a.share));
    out.truncate(MAX_SERIES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy(name: &str, share: f64, victims: &[&str]) -> Finding {
        Finding::new("host.noisy-neighbor", Severity::Warning, "t")
            .evidence(
                "culprit",
                stealscope_findings::evidence!({"kind": "host-process", "name": name, "pid": 812}),
            )
            .evidence("share_of_vcpu_wait", share)
            .evidence(
                "victims",
                victims.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            )
    }

    #[test]
    fn victims_and_culprits_are_bounded() {
        let mut f: Vec<Finding> = (0..8)
            .map(|i| noisy(&format!("p{i}"), 0.3 + i as f64 / 100.0, &["web", "db"]))
            .collect();
        f.push(noisy("backup", 0.9, &["a", "b", "c", "d", "e"]));
        f.push(Finding::new("host.steal.busy", Severity::Critical, "x"));
        let n = of(&f);
        assert_eq!(n.len(), MAX_SERIES);
        assert_eq!(n[0].culprit.name, "backup");
        assert_eq!(n[0].victims, "a,b,c,+2 more");
        assert_eq!(n[1].victims, "web,db");
        assert!(n.iter().all(|x| x.culprit.kind == Kind::HostProcess));
    }
}
