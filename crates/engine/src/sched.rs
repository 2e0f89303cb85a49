//! The engine's place for the scheduler-event collector (stealscope-sched,
//! issue 17): started at the first window, told the vCPU threads of every
//! host scan, read at each window. Until a route lands the collector says
//! why it cannot run; that reason reaches the subscriber once and the slot
//! stays quiet.

use crate::sampler::Subscriber;
use stealscope_model::host::discovery::ThreadRole;
use stealscope_model::host::HostTracker;
use stealscope_readers::ReadError;
use stealscope_sched::{Collector, Preference};

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

    /// Reads the collector (starting it at the first window).
    pub fn read(&mut self, sub: &mut dyn Subscriber) -> Result<(), ReadError> {
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
                    return sub.sched(Err(e.to_string()));
                }
            }
        }
        let SchedSlot::Running { c, .. } = self else {
            return Ok(());
        };
        match c.read() {
            Ok(s) => sub.sched(Ok(&s)),
            Err(e) => {
                *self = SchedSlot::Gone;
                sub.sched(Err(format!("scheduler events stopped: {e}")))
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

    #[derive(Default)]
    struct Said {
        read: usize,
        why: Vec<String>,
    }
    impl Subscriber for Said {
        fn sched(
            &mut self,
            r: Result<&stealscope_sched::SchedSample, String>,
        ) -> Result<(), ReadError> {
            match r {
                Ok(_) => self.read += 1,
                Err(e) => self.why.push(e),
            }
            Ok(())
        }
    }

    #[test]
    fn the_collector_is_read_each_window_or_its_absence_said_once() {
        let mut said = Said::default();
        SchedSlot::new(false).read(&mut said).unwrap();
        assert_eq!((said.read, said.why.len()), (0, 0), "not asked: silent");
        let mut slot = SchedSlot::new(true);
        for _ in 0..3 {
            slot.read(&mut said).unwrap();
        }
        // Independent of the slot: can this kernel and build start one?
        match Collector::start(Preference::Auto) {
            Ok(_) => assert_eq!(said.read, 3, "{:?}", said.why),
            Err(e) => {
                assert_eq!(said.why, [e.to_string()], "said once");
                assert_eq!(said.read, 0);
            }
        }
    }
}
