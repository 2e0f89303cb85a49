//! Merges per-CPU event streams into one timestamp order. A wake-up recorded
//! on CPU 0 that targets CPU 1 must be applied between the right two of CPU
//! 1's switches, and each CPU's buffer is read separately.
//!
//! The reader drains every CPU after noting the time t0; every event stamped
//! before t0 (less a margin for writers still committing) is then in hand,
//! so [`Merger::release`] hands out everything up to that watermark in
//! order and holds the rest. The reorder window is therefore bounded by one
//! drain: what is held is only what was stamped after the drain began. An
//! event that still arrives older than what was already released cannot be
//! placed: it is dropped, counted, and its CPU marked [`Event::Lost`].

use crate::aggregate::Event;
use std::collections::VecDeque;

#[derive(Default)]
pub struct Merger {
    /// Per CPU, in the CPU's own (timestamp) order.
    held: Vec<VecDeque<Event>>,
    /// Everything up to here has been released.
    released: u64,
    /// Events dropped for arriving after their time was released.
    pub late: u64,
}

impl Merger {
    /// Holds an event read from `cpu`'s buffer.
    pub fn push(&mut self, cpu: usize, ev: Event) {
        if self.held.len() <= cpu {
            self.held.resize_with(cpu + 1, VecDeque::new);
        }
        let q = &mut self.held[cpu];
        if ev.ts() < self.released {
            // A loss marker stamped with the CPU's last event is not late.
            if !matches!(ev, Event::Lost { .. }) {
                self.late += 1;
            }
            if !matches!(q.back(), Some(Event::Lost { .. })) {
                q.push_back(Event::Lost {
                    cpu: cpu as u32,
                    ts: self.released,
                });
            }
            return;
        }
        q.push_back(ev);
    }

    /// Events held now.
    pub fn held(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }

    /// Hands out every held event stamped at or before `watermark`, oldest
    /// first (ties keep each CPU's own order).
    pub fn release(&mut self, watermark: u64, mut f: impl FnMut(&Event)) {
        let mut out: Vec<Event> = Vec::new();
        for q in &mut self.held {
            while q.front().is_some_and(|e| e.ts() <= watermark) {
                out.extend(q.pop_front());
            }
        }
        out.sort_by_key(Event::ts);
        for e in &out {
            f(e);
        }
        self.released = self.released.max(watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn irq(cpu: u32, ts: u64) -> Event {
        Event::IrqEnter { cpu, ts }
    }

    #[test]
    fn interleaves_cpus_by_time_and_holds_the_future() {
        let mut m = Merger::default();
        for ts in [10, 30, 50] {
            m.push(0, irq(0, ts));
        }
        m.push(
            1,
            Event::Wakeup {
                ts: 20,
                tid: 5,
                target_cpu: 0,
            },
        );
        m.push(1, irq(1, 40));
        let mut got = Vec::new();
        m.release(45, |e| got.push(e.ts()));
        assert_eq!(got, vec![10, 20, 30, 40]);
        assert_eq!(m.held(), 1);
        m.release(100, |e| got.push(e.ts()));
        assert_eq!(got, vec![10, 20, 30, 40, 50]);
        assert_eq!(m.late, 0);
    }

    #[test]
    fn a_late_event_is_dropped_and_marks_its_cpu_lost() {
        let mut m = Merger::default();
        m.push(0, irq(0, 10));
        m.release(100, |_| {});
        m.push(1, irq(1, 90));
        m.push(1, irq(1, 95));
        m.push(1, irq(1, 120));
        let mut got = Vec::new();
        m.release(200, |e| got.push(e.clone()));
        assert_eq!(m.late, 2);
        assert_eq!(got, vec![Event::Lost { cpu: 1, ts: 100 }, irq(1, 120)]);
    }
}
