//! The watched threads of the BPF route and their slots in the program's
//! `vstates` array (a thread's state between events, found by array index
//! rather than a hash lookup: see wait_by.bpf.c).

use std::collections::{BTreeMap, BTreeSet};

/// Tids the program's `slots` array covers: the kernel's PID_MAX_LIMIT, so
/// every tid there can be is covered whatever pid_max becomes.
pub(crate) const TID_LIMIT: u32 = 1 << 22;

/// Which slot each watched thread holds, and the free ones.
#[derive(Debug)]
pub(crate) struct Slots {
    of: BTreeMap<u32, u32>,
    /// Freed by the previous change of the watched set or before: a slot
    /// freed now is not given out in the same change, so a program still
    /// running on the old owner's state cannot write into the new one's.
    /// Given lowest first: the program keeps the counters of the lowest
    /// slots in an array, the rest in a hash (see wait_by.bpf.c, `fast`).
    free: BTreeSet<u32>,
    next: u32,
    cap: u32,
}

impl Slots {
    /// Room for `cap` threads (the `vstates` array's size).
    pub(crate) fn new(cap: u32) -> Slots {
        Slots {
            of: BTreeMap::new(),
            free: BTreeSet::new(),
            next: 0,
            cap,
        }
    }

    /// The watched threads, ascending.
    pub(crate) fn tids(&self) -> impl Iterator<Item = u32> + '_ {
        self.of.keys().copied()
    }

    /// The watched threads with their slots, by tid.
    pub(crate) fn held(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.of.iter().map(|(&t, &s)| (t, s))
    }

    /// The slot `tid` holds, if watched.
    pub(crate) fn slot(&self, tid: u32) -> Option<u32> {
        self.of.get(&tid).copied()
    }

    pub(crate) fn len(&self) -> usize {
        self.of.len()
    }

    pub(crate) fn contains(&self, tid: u32) -> bool {
        self.of.contains_key(&tid)
    }

    /// The lowest free slot, or None when every one is taken. Not yet
    /// anyone's: see [`Slots::hold`].
    pub(crate) fn pick(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop_first() {
            return Some(s);
        }
        (self.next < self.cap).then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// `tid` now holds `slot` (from [`Slots::pick`]).
    pub(crate) fn hold(&mut self, tid: u32, slot: u32) {
        self.of.insert(tid, slot);
    }

    /// Gives a picked slot back unused.
    pub(crate) fn unpick(&mut self, slot: u32) {
        self.free.insert(slot);
    }

    /// Removes `tid`; its slot, to be freed by [`Slots::free_later`]
    /// once the change is complete.
    pub(crate) fn release(&mut self, tid: u32) -> Option<u32> {
        self.of.remove(&tid)
    }

    pub(crate) fn free_later(&mut self, slots: impl IntoIterator<Item = u32>) {
        self.free.extend(slots);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_unique_and_bounded() {
        let mut s = Slots::new(3);
        let a: Vec<u32> = (0..4).filter_map(|_| s.pick()).collect();
        assert_eq!(a, vec![0, 1, 2], "three slots, then none");
        for (tid, slot) in [(10, 0), (11, 1), (12, 2)] {
            s.hold(tid, slot);
        }
        let freed = s.release(11).unwrap();
        assert_eq!(s.pick(), None, "a released slot waits for free_later");
        s.free_later([freed]);
        assert_eq!(s.pick(), Some(1));
        assert_eq!(s.tids().collect::<Vec<_>>(), vec![10, 12]);
        assert!(s.contains(10) && !s.contains(11));
        assert_eq!(s.len(), 2);
        assert_eq!(s.held().collect::<Vec<_>>(), vec![(10, 0), (12, 2)]);
        assert_eq!((s.slot(12), s.slot(11)), (Some(2), None));
    }

    #[test]
    fn the_lowest_free_slot_first() {
        let mut s = Slots::new(8);
        let a: Vec<u32> = (0..5).filter_map(|_| s.pick()).collect();
        for (i, &slot) in a.iter().enumerate() {
            s.hold(100 + i as u32, slot);
        }
        let freed: Vec<u32> = [104, 101, 103]
            .iter()
            .filter_map(|&t| s.release(t))
            .collect();
        s.free_later(freed);
        assert_eq!((s.pick(), s.pick()), (Some(1), Some(3)));
        assert_eq!((s.pick(), s.pick()), (Some(4), Some(5)));
    }
}
