//! How queued time is charged: the one definition both routes follow. The
//! tracefs route feeds its decoded events to [`Aggregator`]; the BPF program
//! (bpf/wait_by.bpf.c) implements the same rules in the kernel.
//!
//! Rules:
//! - A watched thread is **queued** on CPU c from the moment it is put on
//!   c's run queue without running: `sched_wakeup`/`sched_wakeup_new` (with
//!   `target_cpu` c), or a `sched_switch` on c in which it is `prev` and still
//!   runnable (preempted, or `prev_state` TASK_RUNNING). It stops being
//!   queued at the `sched_switch` in which it is `next`: that closes one
//!   **episode** (its length goes to the histogram).
//! - `sched_migrate_task` of a queued thread from `orig_cpu` to `dest_cpu`
//!   charges the stretch so far on `orig_cpu` and queues it on `dest_cpu`
//!   from then; the episode goes on.
//! - Each nanosecond a thread is queued on c is charged to what was current
//!   on c at that moment: the `next` of c's last `sched_switch` (its tid,
//!   tgid, comm, kthread flag); to `idle` when that was the idle task (pid
//!   0); to `irq` for hard and soft interrupt time on c (irq/softirq
//!   entry/exit) whoever was current; to `unknown` when no record of c
//!   covers it (before the first switch seen on c, or older than the
//!   per-CPU record kept).
//! - Time is the event timestamps' clock (the trace clock: `local` for
//!   tracefs instances, `bpf_ktime_get_ns` for BPF, both CLOCK_MONOTONIC
//!   based), never the reader's.
