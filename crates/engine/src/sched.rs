//! The engine's place for the scheduler-event collector (stealscope-sched,
//! issue 17): started at the first host scan that finds vCPU threads (so a
//! guest, or a host without VMs, pays nothing for it), told the vCPU
//! threads of every later scan, read right before each scan. When it cannot run,
//! the reason reaches the subscriber once and the slot stays quiet.

use crate::host::HostTracker;
use stealscope_model::host::discovery::ThreadRole;
use stealscope_sched::{Collector, Preference, SchedSample};

pub(crate) enum SchedSlot {
    /// Not asked for.
    Off,
    /// Asked for; starts when there are vCPU threads to watch.
    Pending,
    Running {
        c: Collector,
        tids: Vec<u32>,
    },
    /// Could not start or stopped; the reason until it was said.
    Gone(Option<String>),
}

impl SchedSlot {
    pub fn new(on: bool) -> SchedSlot {
        if on {
            SchedSlot::Pending
        } else {
            SchedSlot::Off
        }
    }

    /// Reads the collector: None when off, not started yet or already
    /// said gone, else the reading or why there is none.
    pub fn read(&mut self) -> Option<Result<SchedSample, String>> {
        match self {
            SchedSlot::Gone(why) => why.take().map(Err),
            SchedSlot::Running { c, .. } => match c.read() {
                Ok(s) => Some(Ok(s)),
                Err(e) => {
                    *self = SchedSlot::Gone(None);
                    Some(Err(format!("scheduler events stopped: {e}")))
                }
            },
            SchedSlot::Off | SchedSlot::Pending => None,
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
    fn watch_tids(&mut self, now: Vec<u32>) {
        if matches!(self, SchedSlot::Pending) && !now.is_empty() {
            *self = match Collector::start(Preference::Auto) {
                Ok(c) => SchedSlot::Running {
                    c,
                    tids: Vec::new(),
                },
                Err(e) => SchedSlot::Gone(Some(e.to_string())),
            };
        }
        let SchedSlot::Running { c, tids } = self else {
            return;
        };
        if now != *tids && c.watch(&now).is_ok() {
            *tids = now;
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
}
