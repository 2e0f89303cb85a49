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
use stealscope_readers::pread::PreadFile;
use stealscope_readers::stat::{self, ProcStat};
use stealscope_readers::ReadError;

/// One read as taken: its clock (the `Instant` is derived at delivery),
/// and the end of its rows in `bytes` (or why the read failed), with the
/// counter reading taken right after it.
struct Held {
    t_ns: u64,
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
    /// Keeps the cpu rows of one read given as bytes (`Err`: the read
    /// failed): the copy that [`SampleBatch::hold_read`] is checked against.
    #[cfg(test)]
    fn hold(&mut self, t_ns: u64, read: Result<&[u8], ReadError>, counters: Option<CounterSample>) {
        let rows = read.map(|b| {
            self.bytes.extend_from_slice(&b[..stat::cpu_block_end(b)]);
            self.bytes.len()
        });
        self.held.push(Held {
            t_ns,
            rows,
            counters,
        });
    }

    /// Reads `file` (/proc/stat) straight into the batch and keeps its
    /// cpu rows, with the counter reading `counters` gives when the read
    /// worked ([`PreadFile::read_append`]: no copy).
    #[inline]
    pub fn hold_read(
        &mut self,
        t_ns: u64,
        file: &mut PreadFile,
        counters: impl FnOnce() -> Option<CounterSample>,
    ) {
        let start = self.bytes.len();
        let rows = file.read_append(&mut self.bytes).map(|_| {
            let end = start + stat::cpu_block_end(&self.bytes[start..]);
            self.bytes.truncate(end);
            end
        });
        let counters = rows.as_ref().ok().and_then(|_| counters());
        self.held.push(Held {
            t_ns,
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
        let clock = stealscope_readers::clock::base();
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
                            now: clock.instant(h.t_ns),
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
        b.hold(1, Ok(&reads[0]), None);
        b.hold(2, Err(ReadError::parse(stat::PATH, "gone")), None);
        b.hold(3, Ok(&reads[1]), None);
        b.hold(4, Ok(b"cpu  x\n"), None);
        b.hold(5, Ok(&reads[2]), None);
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

    /// Read straight into the batch, a read parses as the same bytes held
    /// by copy: on a file of one show that fits and on one past the pread
    /// buffer (many CPUs), each with the counters asked only then.
    #[test]
    fn reads_held_in_place_parse_as_copies() {
        let live = live();
        let mut big = live.clone();
        // Numbered on from the live CPUs, so the rows stay in order.
        let mut live_rows = ProcStat::default();
        stat::parse_cpu_rows(&live, stat::PATH, &mut live_rows).unwrap();
        let first = live_rows.cpus.iter().filter_map(|r| r.cpu).max().unwrap() + 1;
        let rows: String = (first..first + 1000)
            .map(|c| format!("cpu{c} 1 2 3 4 5 6 7 8 0 0\n"))
            .collect();
        let at = big.windows(5).position(|w| w == b"\nintr").unwrap() + 1;
        big.splice(at..at, rows.into_bytes());
        assert!(big.len() > 16 * 1024);
        for text in [live, big] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("proc")).unwrap();
            std::fs::write(dir.path().join("proc/stat"), &text).unwrap();
            let mut f = PreadFile::open(dir.path(), stat::PATH).unwrap();
            let mut b = SampleBatch::default();
            let mut asked = 0;
            b.hold_read(1, &mut f, || {
                asked += 1;
                None
            });
            b.hold(2, Ok(&text), None);
            b.hold_read(3, &mut f, || None);
            let mut got = Vec::new();
            b.deliver(&mut ProcStat::default(), |d| {
                if let Delivered::Sample { t_ns, stat, .. } = d {
                    got.push((t_ns, stat.clone()));
                }
                Ok::<(), ()>(())
            })
            .unwrap();
            assert_eq!(asked, 1);
            assert_eq!(got.len(), 3, "{} bytes", text.len());
            assert!(got[0].1.cpus.len() >= 2);
            assert_eq!(got[0].1, got[1].1);
            assert_eq!(got[2].1, got[1].1);
        }
    }

    /// A subscriber's error stops the delivery; the batch is emptied.
    #[test]
    fn a_subscriber_error_ends_the_delivery() {
        let mut b = SampleBatch::default();
        let s = live();
        for t in 0..3 {
            b.hold(t, Ok(&s), None);
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
