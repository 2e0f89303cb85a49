//! /proc/stat samples held raw between deliveries (record's batch mode).
//!
//! Why: at 100 Hz the sampler sleeps 10 ms between reads, and on a VM the
//! caches and predictors are cold after each sleep, so the first touch of
//! any code or data costs ~10x its warm cost. Measured on the 2-vCPU dev
//! VM (rdtsc around each step, medians): parsing a sample and encoding it
//! for the file took ~16k cycles right after the wake-up, about half of
//! everything record did in user space per sample. Kept raw, a sample costs
//! a copy of its cpu rows (the bytes pread just wrote, still in cache);
//! parsing and encoding then run back to back once a second, warm.
//!
//! Only the cpu rows are kept ([`stat::cpu_block_end`]): the rest of the
//! file (the interrupt and softirq totals) is as long again on a big host
//! and nothing reads it.

use std::time::Instant;
use stealscope_readers::perf::CounterSample;
use stealscope_readers::stat::{self, ProcStat};
use stealscope_readers::ReadError;

/// One read as taken: its clock, and the end of its rows in `bytes` (or
/// why the read failed), with the counter reading taken right after it.
struct Held {
    t_ns: u64,
    now: Instant,
    rows: Result<usize, ReadError>,
    counters: Option<CounterSample>,
}

/// The reads since the last delivery, in order.
#[derive(Default)]
pub struct SampleBatch {
    bytes: Vec<u8>,
    held: Vec<Held>,
}

/// A held sample as the subscriber gets it: parsed, or why not.
pub enum Delivered<'a> {
    Sample {
        t_ns: u64,
        now: Instant,
        stat: &'a ProcStat,
        counters: Option<&'a CounterSample>,
    },
    Error(ReadError),
}

impl SampleBatch {
    /// Keeps the cpu rows of one read (`Err`: the read failed).
    pub fn hold(
        &mut self,
        t_ns: u64,
        now: Instant,
        read: Result<&[u8], ReadError>,
        counters: Option<CounterSample>,
    ) {
        let rows = read.map(|b| {
            self.bytes.extend_from_slice(&b[..stat::cpu_block_end(b)]);
            self.bytes.len()
        });
        self.held.push(Held {
            t_ns,
            now,
            rows,
            counters,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Parses each held read into `parsed` and hands it to `f` in order;
    /// the batch is empty afterwards, its memory kept for the next.
    pub fn deliver<E>(
        &mut self,
        parsed: &mut ProcStat,
        mut f: impl FnMut(Delivered<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut start = 0;
        let mut out = Ok(());
        for h in self.held.drain(..) {
            if out.is_err() {
                continue;
            }
            let d = match h.rows {
                Ok(end) => {
                    let rows = &self.bytes[start..end];
                    start = end;
                    match stat::parse_cpu_rows(rows, stat::PATH, parsed) {
                        Ok(()) => Delivered::Sample {
                            t_ns: h.t_ns,
                            now: h.now,
                            stat: parsed,
                            counters: h.counters.as_ref(),
                        },
                        Err(e) => Delivered::Error(e),
                    }
                }
                Err(e) => Delivered::Error(e),
            };
            out = f(d);
        }
        self.bytes.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> Vec<u8> {
        std::fs::read("/proc/stat").unwrap()
    }

    /// Held and delivered later, each read parses to what parsing it at
    /// once gives, in order, with failures in their place.
    #[test]
    fn delivers_what_an_immediate_parse_gives_in_order() {
        let reads: Vec<Vec<u8>> = (0..3).map(|_| live()).collect();
        let mut b = SampleBatch::default();
        let t = Instant::now();
        b.hold(1, t, Ok(&reads[0]), None);
        b.hold(2, t, Err(ReadError::parse(stat::PATH, "gone")), None);
        b.hold(3, t, Ok(&reads[1]), None);
        b.hold(4, t, Ok(b"cpu  x\n"), None);
        b.hold(5, t, Ok(&reads[2]), None);
        let mut got = Vec::new();
        let mut parsed = ProcStat::default();
        b.deliver(&mut parsed, |d| {
            got.push(match d {
                Delivered::Sample { t_ns, stat, .. } => Ok((t_ns, stat.clone())),
                Delivered::Error(e) => Err(e.to_string()),
            });
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(b.is_empty());
        let at_once = |bytes: &[u8]| {
            let mut p = ProcStat::default();
            stat::parse_cpu_rows(bytes, stat::PATH, &mut p).unwrap();
            p
        };
        assert_eq!(got.len(), 5);
        assert_eq!(got[0], Ok((1, at_once(&reads[0]))));
        assert!(got[1].as_ref().unwrap_err().contains("gone"));
        assert_eq!(got[2], Ok((3, at_once(&reads[1]))));
        assert!(got[3].is_err(), "{:?}", got[3]);
        assert_eq!(got[4], Ok((5, at_once(&reads[2]))));
        assert!(!got[0].as_ref().unwrap().1.cpus.is_empty());
    }

    /// A subscriber's error stops the delivery; the batch is emptied.
    #[test]
    fn a_subscriber_error_ends_the_delivery() {
        let mut b = SampleBatch::default();
        let s = live();
        for t in 0..3 {
            b.hold(t, Instant::now(), Ok(&s), None);
        }
        let mut n = 0;
        let r = b.deliver(&mut ProcStat::default(), |_| {
            n += 1;
            Err("full")
        });
        assert_eq!((r, n), (Err("full"), 1));
        assert!(b.is_empty());
    }
}
