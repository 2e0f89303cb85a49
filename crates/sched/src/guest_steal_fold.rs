//! The guest steal rule, written once: `observe` in bpf/guest_steal.bpf.c
//! mirrors [`StealFold::observe`]. At each reading of a CPU's steal clock,
//! the advance since the previous reading is one episode, charged to what
//! the CPU had current meanwhile; the first reading only sets the start
//! (steal before the collector started is not in its totals), and a
//! reading that did not advance charges nothing.

use std::collections::HashMap;
use stealscope_who::guest_steal::{sort_tasks, CpuSteal, StealVictim, TaskSteal};

/// One CPU's readings folded into its totals and its tasks'.
#[derive(Debug, Clone)]
pub struct StealFold {
    last: Option<u64>,
    threshold_ns: u64,
    cpu: CpuSteal,
    tasks: HashMap<(u32, u64), TaskSteal>,
}

impl StealFold {
    pub fn new(cpu: u32, threshold_ns: u64) -> StealFold {
        StealFold {
            last: None,
            threshold_ns,
            cpu: CpuSteal {
                cpu,
                ..CpuSteal::default()
            },
            tasks: HashMap::new(),
        }
    }

    /// A reading `clock` of the CPU's steal clock, `current` being what
    /// ran since the previous one. Returns the episode's ns when it is at
    /// or over the threshold (the kernel side sends those to its ring).
    pub fn observe(&mut self, clock: u64, current: &StealVictim) -> Option<u64> {
        self.cpu.hook_runs += 1;
        let Some(last) = self.last else {
            self.last = Some(clock);
            self.cpu.steal_clock_ns = clock;
            return None;
        };
        if clock <= last {
            return None;
        }
        let ns = clock - last;
        self.last = Some(clock);
        self.cpu.steal_clock_ns = clock;
        match current {
            StealVictim::Idle => {
                self.cpu.idle_ns += ns;
                self.cpu.idle_episodes += 1;
            }
            StealVictim::Task(id) => {
                self.cpu.busy_ns += ns;
                self.cpu.busy_episodes += 1;
                let t = self
                    .tasks
                    .entry((id.tid, id.start_ns))
                    .or_insert_with(|| TaskSteal {
                        task: id.clone(),
                        busy_ns: 0,
                        episodes: 0,
                    });
                t.task.comm.clone_from(&id.comm);
                t.busy_ns += ns;
                t.episodes += 1;
            }
        }
        self.cpu.episodes.record(ns);
        (ns >= self.threshold_ns).then_some(ns)
    }

    /// The CPU's totals so far.
    pub fn cpu(&self) -> &CpuSteal {
        &self.cpu
    }

    /// Tasks charged so far, most busy steal first.
    pub fn tasks(&self) -> Vec<TaskSteal> {
        let mut v: Vec<TaskSteal> = self.tasks.values().cloned().collect();
        sort_tasks(&mut v);
        v
    }
}
