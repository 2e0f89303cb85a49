//! The live end of attribution, in one place: starts the scheduler-event
//! collector at the start of an interval watching every vCPU thread, and
//! stores its cumulative reading in each side of the snapshot
//! ([`super::sched_store::SCHED_FILE`]), or why there is none. The
//! derivation (model::host::attribution) only ever sees the stored
//! readings: this live part sits in the engine, the model stays pure.
//!
//! Timing: the t0 reading follows the side's thread times by the time the
//! rest of t0 took to read, and the t1 reading is taken just before t1's
//! thread times; attribution therefore covers a few ms less than the
//! schedstat interval (the `host` report compares the two).

use stealscope_model::host::observation::VmObs;
use stealscope_model::host::sched_store::{StoredSched, SCHED_FILE};
use stealscope_readers::MemFs;
use stealscope_sched::{Collector, Preference};

pub struct SchedHook {
    collector: Option<Collector>,
    unavailable: Vec<String>,
}

impl SchedHook {
    /// Starts the collector on the vCPU threads of `vms` and stores its
    /// first reading (or why it could not start) in the t0 side.
    pub fn start(vms: &[VmObs], t0: &mut MemFs) -> SchedHook {
        let (hook, first) = SchedHook::begin(vms);
        put(t0, &first);
        hook
    }

    /// Starts the collector on the vCPU threads of `vms`; its first
    /// reading (or why it could not start), for a side kept in memory.
    pub fn begin(vms: &[VmObs]) -> (SchedHook, StoredSched) {
        let tids: Vec<u32> = vms
            .iter()
            .flat_map(|v| v.vcpus.iter().map(|(_, t)| t.tid))
            .collect();
        let mut hook = match Collector::start(Preference::Auto) {
            Ok(c) => SchedHook {
                collector: Some(c),
                unavailable: Vec::new(),
            },
            Err(e) => SchedHook {
                collector: None,
                unavailable: e.reasons,
            },
        };
        if let Some(c) = hook.collector.as_mut() {
            if let Err(e) = c.watch(&tids) {
                hook.unavailable = vec![format!("{}: {e}", c.route().as_str())];
                hook.collector = None;
            }
        }
        let first = hook.read();
        (hook, first)
    }

    /// The collector's cumulative reading now (call right before reading
    /// t1, then [`put`] it into the t1 side).
    pub fn read(&mut self) -> StoredSched {
        match self.collector.as_mut().map(|c| (c.route(), c.read())) {
            Some((_, Ok(s))) => {
                let mut stored = StoredSched::from(&s);
                if let StoredSched::Sample(x) = &mut stored {
                    for t in &mut x.threads {
                        t.schedstat = schedstat(t.tid);
                    }
                }
                stored
            }
            Some((route, Err(e))) => StoredSched::Unavailable {
                unavailable: vec![format!("{}: {e}", route.as_str())],
            },
            None => StoredSched::Unavailable {
                unavailable: self.unavailable.clone(),
            },
        }
    }
}

/// /proc/TID/schedstat: (run ns, wait ns, times run); None once it is gone.
fn schedstat(tid: u32) -> Option<[u64; 3]> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/schedstat")).ok()?;
    let mut v = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some([v.next()??, v.next()??, v.next()??])
}

/// Stores a reading in a snapshot side.
pub fn put(side: &mut MemFs, s: &StoredSched) {
    side.insert(SCHED_FILE, serde_json::to_vec(s).unwrap_or_default());
}
