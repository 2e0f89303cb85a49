//! The BPF route's culprit charges in user space: the kernel map holds
//! what each (victim, culprit) pair accrued, and is pruned after every read
//! (pairs that did not grow since the previous read are deleted), so the
//! cumulative totals a sample reports live here. That keeps the map to the
//! pairs active in about one interval however long `serve` runs, and a
//! new culprit never lands in `unknown` because old ones filled the map.
//!
//! Where asked ([`ChargeTotals::retire_after`], a live view's collector),
//! the totals are pruned too: a culprit that charged a victim nothing for
//! that long is dropped from the victim's totals. Without it they grow
//! with every pair that ever met (issue 29: 10,000 vCPU threads that wait
//! behind each other grew serve's heap by 0.25 MB/s for as long as it ran).
//!
//! A victim's first few culprits are charged in slots inside the victim
//! itself ([`CSlot`], no hash update on the program's hot path); those are
//! never reset while it is watched, so they are folded as running totals.

use aya::Pod;
use std::collections::{BTreeMap, HashMap};
use stealscope_who::waits::Thread;

/// Layouts shared with bpf/wait_by.bpf.c (same field order and sizes).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub(crate) struct ChargeKey {
    pub victim: u32,
    pub tid: u32,
    /// The culprit's task_struct.start_time: a reused tid is another key.
    pub tstart: u64,
    /// Its comm when it ran: an exec is another key.
    pub comm: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Charge {
    pub ns: u64,
    pub tgid: u32,
    pub kthread: u32,
}

/// Culprit slots in each victim (NSLOT in bpf/wait_by.bpf.c).
pub(crate) const NSLOT: usize = 4;

/// One culprit's running total in a victim's own slots (`struct cslot`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CSlot {
    pub ns: u64,
    pub tstart: u64,
    pub comm: [u8; 16],
    pub tid: u32,
    pub tgid: u32,
    pub kthread: u32,
    /// The key's digest, written after the key: 0 is a free slot.
    pub sum: u32,
}

// SAFETY: plain C layouts of integers without padding.
unsafe impl Pod for ChargeKey {}
unsafe impl Pod for Charge {}
unsafe impl Pod for CSlot {}

const _: () = assert!(std::mem::size_of::<ChargeKey>() == 32);
const _: () = assert!(std::mem::size_of::<Charge>() == 16);
const _: () = assert!(std::mem::size_of::<CSlot>() == 48);

impl CSlot {
    /// The program's `slot_sum`: FNV-1a over the key's 32-bit words, never 0.
    fn digest(&self) -> u32 {
        let c0 = u64::from_le_bytes(self.comm[..8].try_into().expect("8 bytes"));
        let c1 = u64::from_le_bytes(self.comm[8..].try_into().expect("8 bytes"));
        let words = [
            self.tid,
            self.tgid,
            self.kthread,
            self.tstart as u32,
            (self.tstart >> 32) as u32,
            c0 as u32,
            (c0 >> 32) as u32,
            c1 as u32,
            (c1 >> 32) as u32,
        ];
        let h = words
            .iter()
            .fold(2_166_136_261u32, |h, &w| (h ^ w).wrapping_mul(16_777_619));
        h | 1
    }

    /// The charge this slot holds for `victim`, if it is published: a
    /// free slot, or one whose copy raced its fill (digest off), is none
    /// this time (its total is read whole at the next read).
    pub(crate) fn charge(&self, victim: u32) -> Option<(ChargeKey, Charge)> {
        if self.sum == 0 || self.sum != self.digest() {
            return None;
        }
        let key = ChargeKey {
            victim,
            tid: self.tid,
            tstart: self.tstart,
            comm: self.comm,
        };
        let c = Charge {
            ns: self.ns,
            tgid: self.tgid,
            kthread: self.kthread,
        };
        Some((key, c))
    }
}

fn comm(b: &[u8; 16]) -> compact_str::CompactString {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    compact_str::CompactString::from_utf8_lossy(&b[..end])
}

/// A victim's cumulative charge by one culprit.
#[derive(Debug, Clone, Copy)]
struct Total {
    ns: u64,
    /// CLOCK_MONOTONIC of the read that last saw it grow.
    grew_ns: u64,
}

/// Cumulative charges per victim and culprit since each victim was watched.
#[derive(Debug, Default)]
pub(crate) struct ChargeTotals {
    /// Each map entry's value at the previous read.
    seen: HashMap<ChargeKey, u64>,
    /// Each victim slot's running total when last read (kept until its
    /// victim is forgotten: a slot is never reset while watched).
    slot_seen: HashMap<ChargeKey, u64>,
    totals: BTreeMap<u32, BTreeMap<Thread, Total>>,
    /// A culprit quiet this long leaves a victim's totals (None: never).
    pub retire_after: Option<u64>,
}

impl ChargeTotals {
    /// Folds one full read of the map in and returns the entries to delete:
    /// those that did not grow since the previous read. An entry deleted
    /// and created again starts from zero, so its whole value is new. (A
    /// charge the program adds in the instant between this read and the
    /// delete is lost: it needs a pair idle for a whole interval to charge
    /// again within microseconds.)
    pub(crate) fn fold(&mut self, entries: &[(ChargeKey, Charge)], now_ns: u64) -> Vec<ChargeKey> {
        let mut idle = Vec::new();
        let mut seen = HashMap::with_capacity(entries.len());
        for (k, c) in entries {
            let prev = self.seen.get(k).copied();
            if prev == Some(c.ns) {
                idle.push(*k);
                continue;
            }
            let grew = match prev {
                Some(p) if c.ns >= p => c.ns - p,
                _ => c.ns,
            };
            seen.insert(*k, c.ns);
            self.add(k, c, grew, now_ns);
        }
        self.seen = seen;
        self.retire(now_ns);
        idle
    }

    /// Folds the published slots of the victims just read (before
    /// [`Self::fold`], which retires): each adds what it grew since it was
    /// last read. A slot missing from one read (its fill raced the copy)
    /// keeps its last total, so the next read adds only what is new.
    pub(crate) fn fold_slots(&mut self, entries: &[(ChargeKey, Charge)], now_ns: u64) {
        for (k, c) in entries {
            let grew = match self.slot_seen.insert(*k, c.ns) {
                Some(p) if c.ns >= p => c.ns - p,
                _ => c.ns,
            };
            if grew > 0 {
                self.add(k, c, grew, now_ns);
            }
        }
    }

    /// Adds `grew` to the victim's total for the culprit `k`, `c` names.
    fn add(&mut self, k: &ChargeKey, c: &Charge, grew: u64, now_ns: u64) {
        let culprit = Thread {
            tid: k.tid,
            tgid: c.tgid,
            comm: comm(&k.comm),
            kthread: c.kthread != 0,
        };
        let t = self
            .totals
            .entry(k.victim)
            .or_default()
            .entry(culprit)
            .or_insert(Total { ns: 0, grew_ns: 0 });
        t.ns += grew;
        t.grew_ns = now_ns;
    }

    /// Drops every culprit quiet for [`Self::retire_after`].
    fn retire(&mut self, now_ns: u64) {
        let Some(after) = self.retire_after else {
            return;
        };
        for by in self.totals.values_mut() {
            by.retain(|_, t| now_ns.saturating_sub(t.grew_ns) < after);
        }
    }

    /// Drops what is kept for victims no longer watched.
    pub(crate) fn forget(&mut self, victims: &[u32]) {
        for v in victims {
            self.totals.remove(v);
        }
        self.seen.retain(|k, _| !victims.contains(&k.victim));
        self.slot_seen.retain(|k, _| !victims.contains(&k.victim));
    }

    /// A victim's cumulative charges by culprit.
    pub(crate) fn of(&self, victim: u32) -> BTreeMap<Thread, u64> {
        self.totals
            .get(&victim)
            .map(|by| by.iter().map(|(c, t)| (c.clone(), t.ns)).collect())
            .unwrap_or_default()
    }

    /// Map entries the previous read saw (for tests of the pruning).
    #[cfg(test)]
    pub(crate) fn live_entries(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(victim: u32, tid: u32, tstart: u64, name: &str) -> ChargeKey {
        let mut comm = [0u8; 16];
        comm[..name.len()].copy_from_slice(name.as_bytes());
        ChargeKey {
            victim,
            tid,
            tstart,
            comm,
        }
    }

    fn charge(ns: u64, tgid: u32) -> Charge {
        Charge {
            ns,
            tgid,
            kthread: 0,
        }
    }

    fn total(t: &ChargeTotals, victim: u32, tid: u32, name: &str) -> u64 {
        t.of(victim)
            .iter()
            .filter(|(c, _)| c.tid == tid && c.comm == name)
            .map(|(_, &ns)| ns)
            .sum()
    }

    fn slot(tid: u32, name: &str, ns: u64) -> CSlot {
        let mut comm = [0u8; 16];
        comm[..name.len()].copy_from_slice(name.as_bytes());
        CSlot {
            ns,
            tstart: 0x1234_5678_9abc,
            comm,
            tid,
            tgid: 4200,
            kthread: 0,
            sum: 0,
        }
    }

    #[test]
    fn a_slot_is_read_only_once_published_whole() {
        let mut s = slot(4242, "CPU 0/KVM", 7);
        assert!(s.charge(9).is_none(), "free (sum 0)");
        // FNV-1a of the key's words, computed apart (python3, struct).
        s.sum = 0xe5e2_3a8b;
        let (k, c) = s.charge(9).expect("published");
        assert_eq!(
            (k.victim, k.tid, k.tstart, c.ns, c.tgid),
            (9, 4242, 0x1234_5678_9abc, 7, 4200)
        );
        assert_eq!(&k.comm[..9], b"CPU 0/KVM");
        // A copy that raced the fill: the digest seen, part of the key not.
        let mut torn = s;
        torn.tgid = 0;
        assert!(torn.charge(9).is_none());
        torn = s;
        torn.comm[8] = 0;
        assert!(torn.charge(9).is_none());
    }

    #[test]
    fn slot_totals_add_what_grew_and_a_skipped_read_counts_once() {
        let mut t = ChargeTotals::default();
        let a = key(1, 10, 5, "burn");
        t.fold_slots(&[(a, charge(100, 10))], 1);
        t.fold_slots(&[(a, charge(250, 10))], 2);
        assert_eq!(total(&t, 1, 10, "burn"), 250);
        // Not seen in one read (torn), then seen again: only the growth.
        t.fold_slots(&[], 3);
        t.fold_slots(&[(a, charge(300, 10))], 4);
        assert_eq!(total(&t, 1, 10, "burn"), 300);
        // Slots and the map's spill add up for one victim.
        let b = key(1, 11, 5, "spill");
        t.fold_slots(&[(a, charge(300, 10))], 5);
        t.fold(&[(b, charge(40, 11))], 5);
        assert_eq!(total(&t, 1, 10, "burn") + total(&t, 1, 11, "spill"), 340);
        // Watched anew after forget: its slots start from zero again.
        t.forget(&[1]);
        t.fold_slots(&[(a, charge(30, 10))], 6);
        assert_eq!(total(&t, 1, 10, "burn"), 30);
    }

    #[test]
    fn totals_grow_by_what_each_entry_added_and_idle_entries_are_pruned() {
        let mut t = ChargeTotals::default();
        let a = key(1, 10, 5, "burn");
        assert!(t.fold(&[(a, charge(100, 10))], 1).is_empty());
        assert!(t.fold(&[(a, charge(250, 10))], 2).is_empty());
        assert_eq!(total(&t, 1, 10, "burn"), 250);
        // Idle for a read: deleted from the map, the total stays.
        assert_eq!(t.fold(&[(a, charge(250, 10))], 3), vec![a]);
        assert_eq!(t.live_entries(), 0);
        assert_eq!(total(&t, 1, 10, "burn"), 250);
        // Charged again after the delete: a fresh entry from zero.
        assert!(t.fold(&[(a, charge(40, 10))], 4).is_empty());
        assert_eq!(total(&t, 1, 10, "burn"), 290);
    }

    #[test]
    fn a_reused_tid_or_an_exec_is_a_culprit_of_its_own_name() {
        let mut t = ChargeTotals::default();
        let old = key(1, 77, 1_000, "CPU 0/KVM");
        let reused = key(1, 77, 9_000, "bash");
        let exec = key(1, 77, 9_000, "stress");
        t.fold(
            &[
                (old, charge(5, 70)),
                (reused, charge(7, 77)),
                (exec, charge(11, 77)),
            ],
            1,
        );
        let m = t.of(1);
        let names: Vec<(&str, u32, u64)> = m
            .iter()
            .map(|(c, &ns)| (c.comm.as_str(), c.tgid, ns))
            .collect();
        assert!(names.contains(&("CPU 0/KVM", 70, 5)), "{names:?}");
        assert!(names.contains(&("bash", 77, 7)), "{names:?}");
        assert!(names.contains(&("stress", 77, 11)), "{names:?}");
    }

    #[test]
    fn forgetting_a_victim_drops_its_totals_only() {
        let mut t = ChargeTotals::default();
        t.fold(
            &[
                (key(1, 10, 0, "a"), charge(1, 10)),
                (key(2, 10, 0, "a"), charge(2, 10)),
            ],
            1,
        );
        t.forget(&[1]);
        assert!(t.of(1).is_empty());
        assert_eq!(total(&t, 2, 10, "a"), 2);
        assert_eq!(t.live_entries(), 1);
    }

    #[test]
    fn a_culprit_quiet_for_the_retire_time_leaves_the_totals() {
        const RETIRE_NS: u64 = 60_000_000_000;
        let mut kept = ChargeTotals::default();
        let mut t = ChargeTotals {
            retire_after: Some(RETIRE_NS),
            ..ChargeTotals::default()
        };
        kept.fold(&[(key(1, 10, 0, "quiet"), charge(5, 10))], 0);
        kept.fold(&[], 10 * RETIRE_NS);
        assert_eq!(total(&kept, 1, 10, "quiet"), 5, "kept when not asked");
        let quiet = key(1, 10, 0, "quiet");
        let busy = key(1, 11, 0, "busy");
        t.fold(&[(quiet, charge(5, 10)), (busy, charge(5, 11))], 0);
        let mut busy_ns = 5;
        for s in 1..=10u64 {
            busy_ns += 5;
            // `quiet` was deleted from the map after its first idle read.
            t.fold(&[(busy, charge(busy_ns, 11))], s * RETIRE_NS / 10);
        }
        assert_eq!(total(&t, 1, 10, "quiet"), 0, "retired");
        assert_eq!(total(&t, 1, 11, "busy"), busy_ns);
        // Back after retiring: a fresh total from zero.
        t.fold(&[(quiet, charge(3, 10))], 2 * RETIRE_NS);
        assert_eq!(total(&t, 1, 10, "quiet"), 3);
    }
}
