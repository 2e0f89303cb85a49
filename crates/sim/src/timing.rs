//! The kernel's timing details (`[scheduler] timing = true`), after
//! kernel/sched/fair.c of 6.x, for ticks of a few milliseconds. The fluid
//! model shares each tick's CPU time by weight; what it leaves out is when
//! things happen inside a tick, and that decides where threads end up:
//!
//! - A woken thread waits for the running entity's turn to end unless its
//!   own group runs (EEVDF with RUN_TO_PARITY ends a turn at the first tick
//!   after its protected slice), so a thread that sleeps and wakes hundreds
//!   of times a second (QEMU's main loop) is runnable far more than it runs:
//!   load in its VM's group on that CPU ([`wake_latency_s`]).
//! - The group weights (calc_group_shares) see the threads queued at the
//!   moment they are computed, not an average ([`sample_queued`]).
//! - Wake-up placement (select_task_rq_fair: wake_affine_weight, then
//!   select_idle_sibling) may move a woken thread to its waker's CPU
//!   (balance.rs `wake_placement`).
//! - The load balancer runs on each CPU every balance_interval x busy_factor,
//!   the interval doubling while balanced; it skips cache-hot threads until
//!   it has failed cache_nice_tries times (balance.rs, with [`Timing`]).
//!
//! Draws come from the run's seeded generator: a seed is one real run.

use crate::host::Host;
use crate::scenario::SchedSpec;
use stealscope_placement::synthetic::Rng;

/// sysctl_sched_migration_cost: a thread that ran this recently is cache hot.
pub const MIGRATION_COST_S: f64 = 0.0005;
/// The normalized base slice of 6.18 (sysctl_sched_base_slice is 0.7 ms x
/// (1 + log2 CPUs): 1.4 ms on this 2-CPU host, /sys/kernel/debug/sched/debug).
pub const BASE_SLICE_S: f64 = 0.0007;
/// sd->busy_factor: a busy CPU balances this many times less often.
pub const BUSY_FACTOR: f64 = 16.0;
/// sd->cache_nice_tries of the cache (MC) level.
pub const CACHE_NICE_TRIES: u32 = 1;

/// Kernel timing constants for one host.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Seconds per jiffy (1 / CONFIG_HZ).
    pub jiffy_s: f64,
    /// sysctl_sched_base_slice for this many CPUs.
    pub slice_s: f64,
}

impl Timing {
    pub fn new(spec: &SchedSpec, cpus: usize) -> Option<Timing> {
        if !spec.timing {
            return None;
        }
        // get_update_sysctl_factor: 1 + ilog2(min(CPUs, 8)).
        let factor = 1.0 + (cpus.clamp(1, 8) as f64).log2().floor();
        Some(Timing {
            jiffy_s: 1.0 / spec.hz.0,
            slice_s: BASE_SLICE_S * factor,
        })
    }

    /// How long a running entity keeps the CPU while others wait: its
    /// protected slice, ended at the next tick (no hrtick).
    pub fn turn_s(&self) -> f64 {
        (self.slice_s / self.jiffy_s).ceil().max(1.0) * self.jiffy_s
    }

    /// Chance that a waiting thread on a CPU with `k` runnable threads ran
    /// within the last migration_cost (task_hot): it waits (k - 1) turns
    /// between runs, and the balancer comes at a random moment of them.
    pub fn p_hot(&self, k: u32) -> f64 {
        if k < 2 {
            return 0.0;
        }
        (MIGRATION_COST_S / ((k - 1) as f64 * self.turn_s())).min(1.0)
    }

    /// The balance interval of a level spanning `cpus` CPUs, in seconds:
    /// sd->balance_interval (min_interval = CPUs ms, doubled while balanced
    /// up to max_interval = 2 x CPUs ms) x busy_factor when busy, in jiffies.
    pub fn balance_interval_s(&self, cpus: usize, doubled: bool, busy: bool) -> f64 {
        let ms = cpus as f64 * if doubled { 2.0 } else { 1.0 };
        let s = ms / 1000.0 * if busy { BUSY_FACTOR } else { 1.0 };
        (s / self.jiffy_s).round().max(1.0) * self.jiffy_s
    }
}

/// Mean wait of a woken thread before it runs, on a CPU where `k` top-level
/// entities (groups, threads) take turns and its own group's entity is the
/// one running with chance `own`. If its group runs, it preempts within the
/// group, unless the running thread is still in its protected slice
/// (RUN_TO_PARITY): then it waits for the rest of that turn and for the
/// other entities' turns. If another entity runs, it waits for the rest of
/// that turn (half a turn on average) and for half of the others waiting.
/// Turns are taken only while two entities or more want the CPU: one that
/// runs alone is preempted at the wake-up (the share of the time a second
/// entity is there, `k` - 1, scales the wait). Measured on QEMU's main loop
/// (264-347 wake-ups a second) beside duty-cycle TCG vCPUs on 2 CPUs: 30-113 us
/// of wait per wake-up where the unscaled wait made it 1-2 ms (BENCHMARKS.md,
/// issue 27 point 1); beside always-busy vCPUs 0.15-2.3 ms.
pub fn wake_latency_s(tm: &Timing, own: f64, k: f64) -> f64 {
    let (turn, p) = (tm.turn_s(), tm.slice_s.min(tm.turn_s()));
    let k = k.max(1.0);
    let own = own.clamp(0.0, 1.0);
    let protected = p / turn * ((turn - p / 2.0) + (k - 1.0) * turn);
    let other = turn / 2.0 + (k - 2.0).max(0.0) * turn / 2.0;
    (k - 1.0).min(1.0) * (own * protected + (1.0 - own) * other)
}

/// How long a thread that goes to sleep stays queued (DELAY_DEQUEUE, 6.12+):
/// having just run it is not eligible, so dequeue_entity leaves it on the
/// run queue until its group's queue picks again, at the end of the turn
/// (half a turn on average) when others take turns there (`k` > 1). A wake-up
/// before that finds it still queued (ttwu_runnable): no wake-up placement.
pub fn delayed_dequeue_s(tm: &Timing, k: f64) -> f64 {
    if k > 1.0 {
        tm.turn_s() / 2.0
    } else {
        0.0
    }
}

/// Draws, for each thread that sleeps, whether it is queued now (its
/// runnable and delayed share of the last tick); without kernel timing such
/// a thread counts when it was queued most of that tick. Threads that do
/// not sleep are queued whenever they want CPU.
pub fn sample_queued(h: &mut Host, tm: Option<&Timing>, rng: &mut Rng) {
    for t in h.tasks.iter_mut().filter(|t| t.alive) {
        let sleeps = t.wakeups_per_s > 0.0 && t.wants < 1.0;
        // cfs_rq->load counts delayed-dequeue threads: still enqueued.
        let share = t.runnable + t.delayed;
        t.queued = match tm {
            Some(_) if sleeps => rng.unit() < share,
            None if sleeps => share >= 0.5,
            _ => t.wants > 0.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_cpus() -> Timing {
        let spec = SchedSpec {
            timing: true,
            ..SchedSpec::default()
        };
        Timing::new(&spec, 2).expect("timing on")
    }

    #[test]
    fn constants_follow_the_kernel_for_two_cpus() {
        let tm = two_cpus();
        // 0.7 ms x (1 + log2 2) = 1.4 ms, as /sys/kernel/debug/sched/debug says.
        assert!((tm.slice_s - 0.0014).abs() < 1e-12);
        // HZ=250: the protected slice ends at the next 4 ms tick.
        assert!((tm.turn_s() - 0.004).abs() < 1e-12);
        // 2 ms x busy_factor 16 = 32 ms, doubled while balanced: 64 ms.
        assert!((tm.balance_interval_s(2, false, true) - 0.032).abs() < 1e-12);
        assert!((tm.balance_interval_s(2, true, true) - 0.064).abs() < 1e-12);
        // An idle CPU balances every 2 ms, rounded to a jiffy.
        assert!((tm.balance_interval_s(2, false, false) - 0.004).abs() < 1e-12);
        assert!(Timing::new(&SchedSpec::default(), 2).is_none());
    }

    #[test]
    fn a_sleeper_stays_queued_only_behind_others() {
        let tm = two_cpus();
        assert_eq!(delayed_dequeue_s(&tm, 1.0), 0.0);
        assert!((delayed_dequeue_s(&tm, 2.0) - 0.002).abs() < 1e-12);
    }

    #[test]
    fn cache_hot_is_likelier_with_fewer_threads_waiting() {
        let tm = two_cpus();
        assert_eq!(tm.p_hot(1), 0.0);
        // One other thread: it last ran within 0.5 ms of a random moment
        // of a 4 ms turn one time in eight.
        assert!((tm.p_hot(2) - 0.125).abs() < 1e-12);
        assert!(tm.p_hot(3) < tm.p_hot(2));
    }

    #[test]
    fn a_woken_thread_waits_for_turns_of_other_entities() {
        let tm = two_cpus();
        // Alone on its CPU, or beside one entity that runs alone: no turns
        // are taken, the wake-up preempts.
        assert_eq!(wake_latency_s(&tm, 1.0, 1.0), 0.0);
        assert_eq!(wake_latency_s(&tm, 0.0, 1.0), 0.0);
        // Half the time a second entity is there: half the wait of two.
        let half = wake_latency_s(&tm, 0.0, 1.5);
        assert!((half - 0.5 * 0.002).abs() < 1e-12, "{half}");
        // Another group runs: the rest of its 4 ms turn, 2 ms on average.
        assert!((wake_latency_s(&tm, 0.0, 2.0) - 0.002).abs() < 1e-12);
        // Its own group runs: 35 % of the time inside the protected 1.4 ms,
        // then the rest of that turn and the other group's turn.
        let own = wake_latency_s(&tm, 1.0, 2.0);
        assert!((own - 0.35 * (0.0033 + 0.004)).abs() < 1e-9, "{own}");
        // More entities, longer waits.
        assert!(wake_latency_s(&tm, 0.5, 4.0) > wake_latency_s(&tm, 0.5, 2.0));
    }
}
