//! Bounded counter series that never go backwards (serve's "top N and
//! `other`" families): every label's all-time total is kept, but only the
//! `top` largest are shown as their own series, the rest as one `other`.
//! The shown set is sticky: a label enters only when its total passes the
//! smallest shown one, which then leaves. `other` (all minus the shown
//! totals) cannot fall at such a swap, since the label that leaves has at
//! least the total the one entering had while it was still inside
//! `other`; and a label that comes back resumes at its all-time total.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone)]
pub struct StickyTop<L: Ord + Clone> {
    top: usize,
    totals: BTreeMap<L, u64>,
    shown: BTreeSet<L>,
    /// Charged to no label: counts only in `other`.
    unlabelled: u64,
}

impl<L: Ord + Clone> StickyTop<L> {
    /// At most `top` labels shown, plus `other`.
    pub fn new(top: usize) -> StickyTop<L> {
        StickyTop {
            top,
            totals: BTreeMap::new(),
            shown: BTreeSet::new(),
            unlabelled: 0,
        }
    }

    /// Charges `n` to `label`.
    pub fn add(&mut self, label: L, n: u64) {
        let total = {
            let t = self.totals.entry(label.clone()).or_default();
            *t = t.saturating_add(n);
            *t
        };
        if self.shown.contains(&label) {
            return;
        }
        if self.shown.len() < self.top {
            self.shown.insert(label);
            return;
        }
        let smallest = self.shown.iter().map(|l| (self.totals[l], l.clone())).min();
        if let Some((least, out)) = smallest {
            if total > least {
                self.shown.remove(&out);
                self.shown.insert(label);
            }
        }
    }

    /// Charges `n` to `other` itself, never to a shown label.
    pub fn add_other(&mut self, n: u64) {
        self.unlabelled = self.unlabelled.saturating_add(n);
    }

    /// The shown labels with their totals, in label order.
    pub fn shown(&self) -> Vec<(&L, u64)> {
        self.shown.iter().map(|l| (l, self.totals[l])).collect()
    }

    /// Everything charged to a label not shown.
    pub fn other(&self) -> u64 {
        let shown: u64 = self.shown.iter().map(|l| self.totals[l]).sum();
        self.total().saturating_sub(shown)
    }

    /// Everything charged so far.
    pub fn total(&self) -> u64 {
        self.totals
            .values()
            .fold(self.unlabelled, |a, v| a.saturating_add(*v))
    }
}

impl<L: Ord + Clone> Default for StickyTop<L> {
    fn default() -> Self {
        StickyTop::new(0)
    }
}
