//! How often the place daemon looks, and how closely. A daemon that has
//! nothing to do is pure cost to the VMs it places: on the 2-CPU test host
//! with busy steal (which no placement removes) every pass ended "placement
//! holds", and its reading of every thread each 0.5 s plus its collector
//! took 0.8 % of a CPU from those VMs (BENCHMARKS.md, issue 27). So, as
//! numad does with `-i MIN:MAX`, each pass with nothing to do doubles the
//! interval up to `max_interval_s`, and such a quiet pass reads the host
//! only at its two ends, with the collector watching nothing.
//!
//! A quiet pass's readings are too coarse to predict a plan from (the
//! prediction replays the 0.5 s samples), so when one wants a change the
//! daemon only looks again at `interval_s`, closely, and decides then.
//! A change refused (predicted worse, or applied and undone by the
//! watchdog) is not a reason to look closely again while it is the same
//! change, for [`REFUSED_KEEP`].

use std::time::{Duration, Instant};
use stealscope_placement::Action;

/// A refused change is looked at closely again after this, whatever else.
pub const REFUSED_KEEP: Duration = Duration::from_secs(300);

/// What a pass came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to do, or nothing that would help (refused, held back).
    Held,
    /// A change is wanted and not applied yet: a quiet pass saw one worth
    /// a close look, or a dry run said what it would do.
    Wanted,
    /// A batch was applied.
    Applied,
}

/// The daemon's pace: the interval now, and the changes refused lately.
#[derive(Debug)]
pub struct Cadence {
    base: Duration,
    max: Duration,
    now: Duration,
    /// Each refused change (the whole plan, the part tried, a batch the
    /// watchdog undid), and when, for [`REFUSED_KEEP`].
    refused: Vec<(Vec<Action>, Instant)>,
}

impl Cadence {
    pub fn new(base: Duration, max: Duration) -> Cadence {
        Cadence {
            base,
            max: max.max(base),
            now: base,
            refused: Vec::new(),
        }
    }

    /// The next pass's length.
    pub fn interval(&self) -> Duration {
        self.now
    }

    /// Whether the next pass samples every thread each 0.5 s and watches
    /// the VMs with the collector (else it reads the host at its ends).
    pub fn close(&self) -> bool {
        self.now <= self.base
    }

    /// The longest a pass can take: what totals differenced pass to pass
    /// must outlast.
    pub fn longest(&self) -> Duration {
        self.max
    }

    /// Whether a quiet pass's plan is worth a close look: it changes
    /// something, and not only what was refused lately.
    pub fn worth_a_look(&self, actions: &[Action], now: Instant) -> bool {
        if actions.is_empty() {
            return false;
        }
        let changes: Vec<Action> = actions.iter().map(Action::change).collect();
        !self
            .refused
            .iter()
            .any(|(c, at)| now.duration_since(*at) < REFUSED_KEEP && *c == changes)
    }

    /// Remembers a change refused: by the prediction, or undone.
    pub fn refused(&mut self, actions: &[Action], now: Instant) {
        self.refused
            .retain(|(_, at)| now.duration_since(*at) < REFUSED_KEEP);
        self.refused
            .push((actions.iter().map(Action::change).collect(), now));
    }

    /// The pace after a pass.
    pub fn after(&mut self, o: Outcome) {
        self.now = match o {
            Outcome::Held => (self.now * 2).min(self.max),
            Outcome::Wanted | Outcome::Applied => self.base,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_placement::action::{CgroupRef, Knob};

    fn weight(value: u64, reason: &str) -> Action {
        Action::CpuWeight {
            vm: "a".into(),
            pid: 1,
            group: CgroupRef {
                v2: true,
                dir: "/sys/fs/cgroup/a".into(),
            },
            value,
            from: Some(100),
            via: Knob::Direct,
            reason: reason.into(),
        }
    }

    #[test]
    fn quiet_passes_back_off_to_the_longest_and_a_change_comes_back() {
        let s = Duration::from_secs;
        let mut c = Cadence::new(s(10), s(60));
        assert!(c.close());
        let mut seen = Vec::new();
        for _ in 0..5 {
            c.after(Outcome::Held);
            seen.push(c.interval().as_secs());
            assert!(!c.close());
        }
        assert_eq!(seen, [20, 40, 60, 60, 60]);
        c.after(Outcome::Wanted);
        assert_eq!((c.interval(), c.close()), (s(10), true));
        c.after(Outcome::Held);
        c.after(Outcome::Applied);
        assert_eq!(c.interval(), s(10));
        // No backing off when the longest is no longer than the base.
        let mut flat = Cadence::new(s(10), s(5));
        flat.after(Outcome::Held);
        assert_eq!((flat.interval(), flat.close()), (s(10), true));
    }

    #[test]
    fn a_refused_change_is_not_looked_at_again_until_it_changes_or_ages() {
        let t0 = Instant::now();
        let mut c = Cadence::new(Duration::from_secs(10), Duration::from_secs(60));
        assert!(!c.worth_a_look(&[], t0));
        assert!(c.worth_a_look(&[weight(200, "x")], t0));
        c.refused(&[weight(200, "pool at 1.6")], t0);
        // The same change, read with other numbers: not again.
        assert!(!c.worth_a_look(&[weight(200, "pool at 1.7")], t0));
        // Another change, or the same one after REFUSED_KEEP: again.
        assert!(c.worth_a_look(&[weight(300, "pool at 2.4")], t0));
        assert!(c.worth_a_look(&[weight(200, "x")], t0 + REFUSED_KEEP));
        // Both a whole plan and the part of it tried are remembered.
        c.refused(&[weight(300, "undone")], t0);
        assert!(!c.worth_a_look(&[weight(300, "y")], t0));
        assert!(!c.worth_a_look(&[weight(200, "y")], t0));
    }
}
