//! The engine's place for the scheduler-event collector (stealscope-sched,
//! issue 17): started at the first host scan that finds vCPU threads (so a
//! guest, or a host without VMs, pays nothing for it), or by `record`
//! before its first checkpoint ([`SchedSlot::load`]), told the vCPU
//! threads of every later scan, read right before each scan and at each
//! checkpoint ([`SchedSlot::stored`]). When it cannot run, the reason
//! reaches the subscriber once and the slot stays quiet; checkpoints keep
//! storing it.

use crate::host::sched_hook::{self, End};
use crate::host::HostTracker;
use std::time::Duration;
use stealscope_model::host::discovery::ThreadRole;
use stealscope_model::host::sched_store::StoredSched;
use stealscope_sched::{Collector, Preference};
use stealscope_who::SchedSample;

/// A live view (serve, top) differences only consecutive readings, a host
/// scan apart (1 s), so its collector drops a culprit that charged a
/// victim nothing for twenty scans: serve's memory then holds the pairs
/// that met lately, not every pair since it started (issue 29: at 10,000
/// vCPU threads RSS levelled off at about 100 MB with 20 s, 130-160 MB
/// with 60 s, and grew 0.7 MB/s without). record keeps every total: its
/// checkpoints span the whole recording.
pub const LIVE_RETIRE: Duration = Duration::from_secs(20);

pub(crate) enum SchedSlot {
    /// Not asked for.
    Off,
    /// Asked for; starts when there are vCPU threads to watch (for a live
    /// view: `retire`, see [`LIVE_RETIRE`]).
    Pending {
        retire: bool,
    },
    Running {
        c: Collector,
        tids: Vec<u32>,
    },
    /// Could not start or stopped: one reason per route (what a checkpoint
    /// stores), and the message for the subscriber until it was said.
    Gone {
        reasons: Vec<String>,
        unsaid: Option<String>,
    },
}

impl SchedSlot {
    pub fn new(on: bool) -> SchedSlot {
        Self::asked(on, false)
    }

    /// A live view's: [`Self::new`], and its culprit totals bounded by
    /// [`LIVE_RETIRE`].
    pub fn live(on: bool) -> SchedSlot {
        Self::asked(on, true)
    }

    fn asked(on: bool, retire: bool) -> SchedSlot {
        if on {
            SchedSlot::Pending { retire }
        } else {
            SchedSlot::Off
        }
    }

    /// Starts the collector now, watching nothing yet (record: before its
    /// first checkpoint, so that BPF's start-up, ~0.06 s of verifier CPU,
    /// is not inside the recording's whole interval).
    pub fn load() -> SchedSlot {
        match Collector::start(Preference::Auto) {
            Ok(c) => SchedSlot::Running {
                c,
                tids: Vec::new(),
            },
            Err(e) => SchedSlot::Gone {
                unsaid: Some(e.to_string()),
                reasons: e.reasons,
            },
        }
    }

    /// Reads the collector: None when off, not started yet or already
    /// said gone, else the reading or why there is none.
    pub fn read(&mut self) -> Option<Result<SchedSample, String>> {
        match self {
            SchedSlot::Gone { unsaid, .. } => unsaid.take().map(Err),
            SchedSlot::Running { c, .. } => match c.read() {
                Ok(s) => Some(Ok(s)),
                Err(e) => {
                    let route = c.route().as_str();
                    *self = SchedSlot::Gone {
                        reasons: vec![format!("{route}: {e}")],
                        unsaid: None,
                    };
                    Some(Err(format!("scheduler events stopped: {e}")))
                }
            },
            SchedSlot::Off | SchedSlot::Pending { .. } => None,
        }
    }

    /// The cumulative reading now as a snapshot side stores it (each
    /// thread's schedstat read right after), or why there is none; None
    /// when off or not started (no vCPU thread yet): no file, as in a
    /// snapshot of a host without VMs. A read that fails here is still
    /// said at the next scan.
    pub fn stored(&mut self, end: End) -> Option<StoredSched> {
        match self {
            SchedSlot::Off | SchedSlot::Pending { .. } => None,
            SchedSlot::Gone { reasons, .. } => Some(StoredSched::Unavailable {
                unavailable: reasons.clone(),
            }),
            SchedSlot::Running { c, tids } => {
                let fallbacks = c.fallbacks().to_vec();
                match sched_hook::store(tids, end, &fallbacks, || c.read()) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        let route = c.route().as_str();
                        let reasons = vec![format!("{route}: {e}")];
                        *self = SchedSlot::Gone {
                            reasons: reasons.clone(),
                            unsaid: Some(format!("scheduler events stopped: {e}")),
                        };
                        Some(StoredSched::Unavailable {
                            unavailable: reasons,
                        })
                    }
                }
            }
        }
    }

    /// Watches the vCPU threads the host scan read, when they changed.
    pub fn watch(&mut self, host: &HostTracker) {
        let now: Vec<u32> = host
            .samples()
            .iter()
            .filter(|s| matches!(s.role, ThreadRole::Vcpu(_)))
            .map(|s| s.tid)
            .collect();
        self.watch_tids(now);
    }

    /// Starts the collector at the first non-empty set of threads.
    pub fn watch_tids(&mut self, now: Vec<u32>) {
        if let (SchedSlot::Pending { retire }, false) = (&*self, now.is_empty()) {
            let retire = *retire;
            *self = SchedSlot::load();
            if let (SchedSlot::Running { c, .. }, true) = (&mut *self, retire) {
                c.retire_quiet(LIVE_RETIRE);
            }
        }
        let SchedSlot::Running { c, tids } = self else {
            return;
        };
        if now == *tids {
            return;
        }
        // A full map is counted by the route (stats.unwatched); any other
        // failure stops the collector with its reason, said once.
        match c.watch(&now) {
            Ok(()) => *tids = now,
            Err(e) => {
                let route = c.route().as_str();
                *self = SchedSlot::Gone {
                    reasons: vec![format!("{route}: {e}")],
                    unsaid: Some(format!("scheduler events stopped: {e}")),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collector_is_read_each_window_or_its_absence_said_once() {
        assert!(SchedSlot::new(false).read().is_none(), "not asked: silent");
        let mut slot = SchedSlot::new(true);
        assert!(slot.read().is_none(), "nothing to watch yet: not started");
        slot.watch_tids(vec![std::process::id()]);
        let (mut read, mut why) = (0, Vec::new());
        for _ in 0..3 {
            match slot.read() {
                Some(Ok(_)) => read += 1,
                Some(Err(e)) => why.push(e),
                None => {}
            }
        }
        // Independent of the slot: can this kernel and build start one?
        match Collector::start(Preference::Auto) {
            Ok(_) => assert_eq!(read, 3, "{why:?}"),
            Err(e) => {
                assert_eq!(why, [e.to_string()], "said once");
                assert_eq!(read, 0);
            }
        }
    }

    /// What record's checkpoints store: the cumulative reading each time,
    /// with the thread's schedstat read right after it, or the routes'
    /// reasons each time while the note is still said once at a scan.
    #[test]
    fn checkpoints_store_the_reading_or_the_reasons_each_time() {
        assert!(
            SchedSlot::new(true).stored(End::Start).is_none(),
            "no vCPU yet: no file"
        );
        assert!(
            SchedSlot::new(false).stored(End::Start).is_none(),
            "not asked: no file"
        );
        let tid = nix::unistd::gettid().as_raw() as u32;
        let mut slot = SchedSlot::load();
        slot.watch_tids(vec![tid]);
        let a = slot
            .stored(End::Start)
            .expect("loaded: a reading or reasons");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = slot.stored(End::Later).expect("still there");
        match Collector::start(Preference::Auto) {
            Ok(c) => {
                let (StoredSched::Sample(a), StoredSched::Sample(b)) = (&a, &b) else {
                    panic!("{a:?} {b:?}")
                };
                assert_eq!(a.route, c.route().as_str());
                assert!(b.monotonic_ns > a.monotonic_ns);
                for s in [a, b] {
                    // Only the BPF route lists a watched thread that never waited.
                    if let Some(t) = s.threads.iter().find(|t| t.tid == tid) {
                        assert!(t.schedstat.is_some_and(|x| x[0] > 0), "{t:?}");
                        // Read on both sides of the collector's read: the
                        // outside one at or past the inside one at t1,
                        // at or before it at t0.
                        let (o, i) = (t.schedstat.unwrap(), t.schedstat_inside.unwrap());
                        let later = std::ptr::eq(s, b);
                        assert!(if later { o[0] >= i[0] } else { o[0] <= i[0] }, "{t:?}");
                    } else {
                        assert_eq!(s.route, "tracefs", "{s:?}");
                    }
                }
                assert!(
                    matches!(slot.read(), Some(Ok(_))),
                    "the scans still read it"
                );
            }
            Err(e) => {
                let want = StoredSched::Unavailable {
                    unavailable: e.reasons.clone(),
                };
                assert_eq!((&a, &b), (&want, &want));
                assert_eq!(slot.read(), Some(Err(e.to_string())), "said at a scan");
                assert_eq!(slot.read(), None, "once");
            }
        }
    }

    /// A collector that could not start (built here as the slot keeps it,
    /// whatever this kernel allows): every checkpoint stores the routes'
    /// reasons, as a snapshot side does, and the scans say it once.
    #[test]
    fn a_collector_that_could_not_run_is_stored_as_its_reasons() {
        let reasons = vec!["bpf: refused".to_string(), "tracefs: absent".to_string()];
        let mut slot = SchedSlot::Gone {
            reasons: reasons.clone(),
            unsaid: Some("no scheduler events: bpf: refused; tracefs: absent".into()),
        };
        let want = Some(StoredSched::Unavailable {
            unavailable: reasons,
        });
        assert_eq!(slot.stored(End::Start), want);
        assert!(matches!(slot.read(), Some(Err(e)) if e.contains("tracefs: absent")));
        assert_eq!(slot.read(), None, "said once");
        assert_eq!(slot.stored(End::Later), want, "stored each time");
    }
}
