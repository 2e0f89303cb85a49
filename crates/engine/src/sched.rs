//! The engine's place for the scheduler-event collector (stealscope-sched,
//! issue 17): started at the first window, told the vCPU threads of every
//! host scan, read at each window. Until a route lands the collector says
//! why it cannot run; that reason reaches the subscriber once and the slot
//! stays quiet.

use crate::host::HostTracker;
use stealscope_model::host::discovery::ThreadRole;
use stealscope_sched::{Collector, Preference, SchedSample};

pub(crate) enum SchedSlot {
    /// Not asked for.
    Off,
    /// Asked for; starts at the first window.
    Pending,
    Running {
        c: Collector,
        tids: Vec<u32>,
    },
    /// Could not start or stopped: said once.
    Gone,
}

impl SchedSlot {
    pub fn new(on: bool) -> SchedSlot {
        if on {
            SchedSlot::Pending
        } else {
            SchedSlot::Off
        }
    }

    /// Reads the collector (starting it at the first window): None when
    /// off or already said gone, else the reading or why there is none.
    pub fn read(&mut self) -> Option<Result<SchedSample, String>> {
        if let SchedSlot::Pending = self {
            match Collector::start(Preference::Auto) {
                Ok(c) => {
                    *self = SchedSlot::Running {
                        c,
                        tids: Vec::new(),
                    }
                }
                Err(e) => {
                    *self = SchedSlot::Gone;
                    return Some(Err(e.to_string()));
                }
            }
        }
        let SchedSlot::Running { c, .. } = self else {
            return None;
        };
        match c.read() {
            Ok(s) => Some(Ok(s)),
            Err(e) => {
                *self = SchedSlot::Gone;
                Some(Err(format!("scheduler events stopped: {e}")))
            }
        }
    }

    /// Watches the vCPU threads the host scan read, when they changed.
    pub fn watch(&mut self, host: &HostTracker) {
        let SchedSlot::Running { c, tids } = self else {
            return;
        };
        let now: Vec<u32> = host
            .samples()
            .iter()
            .filter(|s| matches!(s.role, ThreadRole::Vcpu(_)))
            .map(|s| s.tid)
            .collect();
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
