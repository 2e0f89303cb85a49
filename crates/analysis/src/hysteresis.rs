//! Hysteresis for rules that run again and again on one host (`top`,
//! `serve`, `daemon`: the engine's rule runner). A rule with a firing and a
//! lower clearing threshold raises its finding in between too, marked as
//! holding; such a finding stays only if the run before raised it for the
//! same subject, so a measure that wavers around the firing threshold does
//! not flip the finding on and off. A one-shot run has no run before: a
//! holding finding is dropped, and the firing threshold alone decides.

use crate::finding::{Evidence, Finding};

/// Evidence key naming what a finding is about (a culprit, a VM), so that
/// two runs' findings of one id can be matched.
pub const SUBJECT: &str = "subject";
/// Evidence key set on a finding between its clearing and firing thresholds.
pub const HYSTERESIS: &str = "hysteresis";
/// ...with this value.
pub const HOLDING: &str = "holding: below the firing threshold, above the clearing one";

/// Marks a finding as holding.
pub fn holding(f: Finding) -> Finding {
    f.evidence(HYSTERESIS, HOLDING)
}

fn key(f: &Finding) -> (String, Option<String>) {
    (
        f.id.clone(),
        f.evidence
            .get(SUBJECT)
            .and_then(Evidence::as_str)
            .map(str::to_string),
    )
}

fn is_holding(f: &Finding) -> bool {
    f.evidence.get(HYSTERESIS).and_then(Evidence::as_str) == Some(HOLDING)
}

/// Drops each holding finding the previous run did not raise for the same
/// subject (all of them when there was no previous run).
pub fn settle(findings: &mut Vec<Finding>, previous: Option<&[Finding]>) {
    let before: Vec<_> = previous.unwrap_or_default().iter().map(key).collect();
    findings.retain(|f| !is_holding(f) || before.contains(&key(f)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Severity;

    fn f(subject: &str, hold: bool) -> Finding {
        let f =
            Finding::new("host.noisy-neighbor", Severity::Warning, "t").evidence(SUBJECT, subject);
        if hold {
            holding(f)
        } else {
            f
        }
    }

    #[test]
    fn a_holding_finding_stays_only_after_one_for_the_same_subject() {
        let mut one_shot = vec![f("a", true), f("b", false)];
        settle(&mut one_shot, None);
        assert_eq!(one_shot.len(), 1);
        assert_eq!(key(&one_shot[0]).1.as_deref(), Some("b"));

        let before = [f("a", false)];
        let mut again = vec![f("a", true), f("c", true)];
        settle(&mut again, Some(&before));
        assert_eq!(again.len(), 1, "a held, c never fired");
        assert_eq!(key(&again[0]).1.as_deref(), Some("a"));
    }
}
