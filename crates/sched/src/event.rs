//! What the tracefs route decodes and the aggregator applies: one
//! scheduler event, and a task's comm as the kernel stores it.

/// A task's comm as the kernel stores it (NUL-padded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Comm(pub [u8; 16]);

impl Comm {
    pub fn new(s: &str) -> Comm {
        let mut c = [0u8; 16];
        let n = s.len().min(15);
        c[..n].copy_from_slice(&s.as_bytes()[..n]);
        Comm(c)
    }

    pub fn as_string(&self) -> String {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }
}

/// A decoded scheduler event, timestamps in ns of the trace clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Switch {
        cpu: u32,
        ts: u64,
        prev_tid: u32,
        /// Empty when the kernel's format has no `prev_comm`.
        prev_comm: Comm,
        /// Preempted, or `prev_state` TASK_RUNNING: it stays queued.
        prev_runnable: bool,
        next_tid: u32,
        next_comm: Comm,
    },
    /// `sched_wakeup` or `sched_wakeup_new`.
    Wakeup {
        ts: u64,
        tid: u32,
        target_cpu: u32,
    },
    Migrate {
        ts: u64,
        tid: u32,
        orig_cpu: u32,
        dest_cpu: u32,
    },
    IrqEnter {
        cpu: u32,
        ts: u64,
    },
    IrqExit {
        cpu: u32,
        ts: u64,
    },
    SoftirqEnter {
        cpu: u32,
        ts: u64,
    },
    SoftirqExit {
        cpu: u32,
        ts: u64,
    },
    /// The kernel dropped events of `cpu` after `ts` (buffer overrun).
    Lost {
        cpu: u32,
        ts: u64,
    },
}

impl Event {
    pub fn ts(&self) -> u64 {
        match *self {
            Event::Switch { ts, .. }
            | Event::Wakeup { ts, .. }
            | Event::Migrate { ts, .. }
            | Event::IrqEnter { ts, .. }
            | Event::IrqExit { ts, .. }
            | Event::SoftirqEnter { ts, .. }
            | Event::SoftirqExit { ts, .. }
            | Event::Lost { ts, .. } => ts,
        }
    }
}
