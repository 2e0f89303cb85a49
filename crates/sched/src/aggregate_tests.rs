//! The charging rules, one hand-built event sequence each.

use super::*;

const V: u32 = 100; // the watched thread
const A: u32 = 200;
const B: u32 = 300;

/// Culprit identities the test controls: tgid = tid + 1, kthread for tid 2.
struct Fixed;
impl Identify for Fixed {
    fn identify(&mut self, tid: u32) -> (u32, bool) {
        (tid + 1, tid == 2)
    }
}

fn agg() -> Aggregator {
    let mut a = Aggregator::with_identity(Box::new(Fixed));
    a.watch(&[V]);
    a
}

fn sw(cpu: u32, ts: u64, prev: u32, runnable: bool, next: u32) -> Event {
    Event::Switch {
        cpu,
        ts,
        prev_tid: prev,
        prev_comm: Comm::new(&format!("t{prev}")),
        prev_runnable: runnable,
        next_tid: next,
        next_comm: Comm::new(&format!("t{next}")),
    }
}

fn wake(ts: u64, tid: u32, cpu: u32) -> Event {
    Event::Wakeup {
        ts,
        tid,
        target_cpu: cpu,
    }
}

fn run(a: &mut Aggregator, evs: &[Event]) -> ThreadWaits {
    for e in evs {
        a.apply(e);
    }
    waits(a).remove(&V).unwrap()
}

/// Every watched thread's counters, as a route's read gives them.
fn waits(a: &Aggregator) -> BTreeMap<u32, ThreadWaits> {
    a.waits(&mut HistPacker::default())
}

fn charged(w: &ThreadWaits, tid: u32) -> u64 {
    w.by_thread
        .iter()
        .filter(|(c, _)| c.tid == tid)
        .map(|(_, &ns)| ns)
        .sum()
}

#[test]
fn preempted_prev_waits_for_whoever_runs() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, 0, false, V),
            sw(1, 100, V, true, A),
            sw(1, 250, A, true, B),
            sw(1, 400, B, true, V),
        ],
    );
    assert_eq!(charged(&w, A), 150);
    assert_eq!(charged(&w, B), 150);
    assert_eq!(w.wait_ns(), 300);
    assert_eq!((w.episodes.count, w.episodes.sum_ns), (1, 300));
    let (c, _) = w.by_thread.iter().find(|(c, _)| c.tid == A).unwrap();
    assert_eq!((c.tgid, c.comm.as_str(), c.kthread), (A + 1, "t200", false));
}

#[test]
fn a_sleeping_prev_waits_only_from_its_wakeup() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, 0, false, V),
            sw(1, 100, V, false, A),
            wake(300, V, 1),
            // A wake-up of a queued thread keeps the first one.
            wake(350, V, 1),
            sw(1, 500, A, true, V),
        ],
    );
    assert_eq!(charged(&w, A), 200);
    assert_eq!(w.wait_ns(), 200);
    assert_eq!(w.episodes.count, 1);
}

#[test]
fn a_wakeup_of_a_running_thread_changes_nothing() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, A, false, V),
            wake(50, V, 1),
            sw(1, 200, V, false, A),
            sw(1, 300, A, false, 0),
        ],
    );
    assert_eq!(w.wait_ns(), 0);
    assert_eq!(w.episodes.count, 0);
}

#[test]
fn migration_mid_wait_charges_both_cpus_in_one_episode() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(0, 0, 0, false, V),
            sw(1, 10, 0, false, B),
            sw(0, 100, V, true, A),
            Event::Migrate {
                ts: 300,
                tid: V,
                orig_cpu: 0,
                dest_cpu: 1,
            },
            // CPU 0 changes hands after V left: not V's business.
            sw(0, 400, A, true, 0),
            sw(1, 700, B, true, V),
        ],
    );
    assert_eq!(charged(&w, A), 200);
    assert_eq!(charged(&w, B), 400);
    assert_eq!(w.idle_ns, 0);
    assert_eq!((w.episodes.count, w.episodes.sum_ns), (1, 600));
}

#[test]
fn a_migration_at_wakeup_is_decided_by_the_wakeup() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(0, 0, 0, false, V),
            sw(1, 0, 0, false, A),
            sw(0, 10, V, false, 0),
            Event::Migrate {
                ts: 90,
                tid: V,
                orig_cpu: 0,
                dest_cpu: 1,
            },
            wake(100, V, 1),
            sw(1, 180, A, true, V),
        ],
    );
    assert_eq!(charged(&w, A), 80);
    assert_eq!(w.wait_ns(), 80);
}

#[test]
fn idle_is_wakeup_latency() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, V, false, 0),
            wake(100, V, 1),
            sw(1, 150, 0, false, V),
        ],
    );
    assert_eq!(w.idle_ns, 50);
    assert!(w.by_thread.is_empty());
}

#[test]
fn interrupt_time_goes_to_irq_whoever_was_current() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, 0, false, V),
            sw(1, 100, V, true, A),
            Event::IrqEnter { cpu: 1, ts: 200 },
            Event::SoftirqEnter { cpu: 1, ts: 210 },
            Event::SoftirqExit { cpu: 1, ts: 240 },
            Event::IrqExit { cpu: 1, ts: 250 },
            Event::SoftirqEnter { cpu: 1, ts: 300 },
            Event::SoftirqExit { cpu: 1, ts: 320 },
            // Interrupts on another CPU are not V's.
            Event::IrqEnter { cpu: 0, ts: 330 },
            sw(1, 400, A, true, V),
        ],
    );
    assert_eq!(w.irq_ns, 70);
    assert_eq!(charged(&w, A), 230);
}

// R5: an interrupt is timed from an entry seen while a watched thread is
// queued on the CPU; the rest of a handler that wakes one is the current
// task's (the BPF program times no interrupt while nothing is queued).
#[test]
fn a_handler_that_wakes_the_thread_charges_its_rest_to_the_current() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, V, false, A),
            Event::IrqEnter { cpu: 1, ts: 100 },
            wake(110, V, 1),
            Event::IrqExit { cpu: 1, ts: 130 },
            Event::SoftirqEnter { cpu: 1, ts: 200 },
            // A hardirq inside a timed softirq is one stretch of irq.
            Event::IrqEnter { cpu: 1, ts: 210 },
            Event::IrqExit { cpu: 1, ts: 220 },
            Event::SoftirqExit { cpu: 1, ts: 250 },
            sw(1, 300, A, true, V),
        ],
    );
    assert_eq!(w.irq_ns, 50, "{w:?}");
    assert_eq!(charged(&w, A), 140);
}

// R6: a missed switch revokes who ran, not interrupt time.
#[test]
fn a_missing_switch_keeps_interrupt_time() {
    let mut a = agg();
    a.watch(&[V, B]);
    for e in [
        sw(1, 0, 0, false, A),
        wake(50, B, 1),
        Event::IrqEnter { cpu: 1, ts: 100 },
        Event::IrqExit { cpu: 1, ts: 130 },
        // A -> V was not traced.
        sw(1, 500, V, true, B),
    ] {
        a.apply(&e);
    }
    let b = &waits(&a)[&B];
    assert_eq!(
        (b.irq_ns, b.unknown_ns, charged(b, A)),
        (30, 420, 0),
        "{b:?}"
    );
}

// R6: a thread woken twice onto the idle CPU stays where its first
// wake-up put it; nothing queued there, no provisional current.
#[test]
fn only_the_first_wakeup_onto_an_idle_cpu_with_a_waiter_counts() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, B, false, 0),
            wake(10, A, 1),
            wake(50, V, 1),
            wake(100, A, 1),
            wake(200, B, 1),
            wake(300, A, 1),
            sw(1, 500, B, false, V),
        ],
    );
    // A's wake-up at 10 found no waiter, its one at 100 did; B (prev) woke
    // at 200: idle before that, A's stretch too, B's after, A's wake-up at
    // 300 changing nothing.
    assert_eq!(
        (w.idle_ns, charged(&w, B), charged(&w, A)),
        (150, 300, 0),
        "{w:?}"
    );
}

#[test]
fn unknown_before_the_first_switch_of_a_cpu() {
    let mut a = agg();
    let w = run(&mut a, &[wake(100, V, 1), sw(1, 300, A, true, V)]);
    assert_eq!(w.unknown_ns, 200);
    assert_eq!(w.wait_ns(), 200);
    assert_eq!(w.episodes.count, 1);
}

#[test]
fn lost_events_make_the_cpu_unknown_until_its_next_switch() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, V, true, A),
            Event::Lost { cpu: 1, ts: 100 },
            sw(1, 400, B, true, A),
            sw(1, 500, A, true, V),
        ],
    );
    // Before the gap A ran; after it V may have run unseen: unknown.
    assert_eq!(charged(&w, A), 100);
    assert_eq!(w.unknown_ns, 400);
    assert_eq!(w.wait_ns(), 500);
    assert_eq!(w.episodes.count, 0, "an episode with a gap has no length");
}

#[test]
fn a_wakeup_after_a_gap_starts_a_certain_episode() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, V, true, A),
            Event::Lost { cpu: 0, ts: 100 },
            // V ran and slept in the gap; this wake-up is the truth.
            wake(300, V, 1),
            sw(1, 450, A, true, V),
        ],
    );
    assert_eq!(charged(&w, A), 100 + 150);
    assert_eq!(w.unknown_ns, 200);
    assert_eq!((w.episodes.count, w.episodes.sum_ns), (1, 150));
}

#[test]
fn episodes_fill_the_histogram() {
    let mut a = agg();
    let mut evs = vec![sw(1, 0, 0, false, V)];
    let mut t = 0;
    for len in [1_000u64, 2_000_000, 20_000_000] {
        evs.push(sw(1, t + 10, V, true, A));
        evs.push(sw(1, t + 10 + len, A, true, V));
        t += 10 + len;
    }
    let w = run(&mut a, &evs);
    let h = &w.episodes;
    assert_eq!(h.count, 3);
    assert_eq!(h.sum_ns, 22_001_000);
    assert_eq!(h.max_ns, 20_000_000);
    assert_eq!((h.over_1ms, h.over_10ms), (2, 1));
    assert_eq!(h.buckets().map(|(_, n)| n).sum::<u64>(), 3);
}

#[test]
fn advance_charges_an_open_wait_and_watch_keeps_counters() {
    let mut a = agg();
    run(&mut a, &[sw(1, 0, V, true, A)]);
    a.advance(1_000);
    assert_eq!(charged(&waits(&a)[&V], A), 1_000);
    // An event stamped before the advance is taken at the advance's time.
    a.apply(&sw(1, 900, A, true, V));
    let w = waits(&a).remove(&V).unwrap();
    assert_eq!((w.wait_ns(), w.episodes.count), (1_000, 1));
    a.watch(&[V, A]);
    assert_eq!(waits(&a)[&V].wait_ns(), 1_000);
    a.watch(&[A]);
    assert!(!waits(&a).contains_key(&V));
}

#[test]
fn kernel_threads_and_their_groups_come_from_identify() {
    let mut a = agg();
    let w = run(&mut a, &[sw(1, 0, V, true, 2), sw(1, 50, 2, false, V)]);
    let (c, &ns) = w.by_thread.iter().next().unwrap();
    assert_eq!((c.tid, c.tgid, c.kthread, ns), (2, 3, true, 50));
}

#[test]
fn proc_identity_of_this_thread_a_kthread_and_a_gone_one() {
    let mut p = ProcIdentity::new("/proc");
    let tid = unsafe { libc::gettid() } as u32;
    assert_eq!(p.identify(tid), (std::process::id(), false));
    if std::path::Path::new("/proc/2/stat").exists() {
        // kthreadd
        assert_eq!(p.identify(2), (2, true));
    }
    assert_eq!(p.identify(u32::MAX - 1), (u32::MAX - 1, false));
}

#[test]
fn a_missing_switch_from_idle_charges_no_idle_wait() {
    // 6.18: V is woken on idle CPU 1 and runs, but the switch idle -> V is
    // not in the trace; the next switch there has V as prev.
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, A, false, 0),
            wake(1_000, V, 1),
            sw(1, 900_000, V, false, 0),
        ],
    );
    assert_eq!(w.wait_ns(), 0, "{w:?}");
    assert_eq!(w.episodes.count, 0);
    assert_eq!(a.missed_switches(), 1);
    // The next wake-up on the idle CPU with its switch traced is charged.
    let w = run(
        &mut a,
        &[wake(1_000_000, V, 1), sw(1, 1_000_040, 0, false, V)],
    );
    assert_eq!((w.idle_ns, w.episodes.count), (40, 1));
}

#[test]
fn a_missing_switch_from_a_task_moves_others_charge_to_unknown() {
    // V and B queued on CPU 1 while A runs; A -> V is not traced, then V is
    // seen as prev. V's charge since the last switch is dropped, B's (who
    // really waited, for A then V) goes to unknown.
    let mut a = agg();
    a.watch(&[V, B]);
    for e in [
        sw(1, 0, 0, false, V),
        wake(50, B, 1),
        sw(1, 100, V, true, A),
        sw(1, 500, V, true, B),
    ] {
        a.apply(&e);
    }
    let w = waits(&a);
    let (v, b) = (&w[&V], &w[&B]);
    assert_eq!(v.wait_ns(), 0, "{v:?}");
    assert_eq!(charged(b, V), 50, "{b:?}");
    assert_eq!(charged(b, A), 0);
    assert_eq!(b.unknown_ns, 400);
    assert_eq!(b.episodes.count, 1);
    assert_eq!(b.episodes.sum_ns, 450);
    assert_eq!(a.missed_switches(), 1);
}

#[test]
fn a_confirmed_switch_keeps_every_charge() {
    let mut a = agg();
    let w = run(
        &mut a,
        &[
            sw(1, 0, 0, false, A),
            wake(100, V, 1),
            sw(1, 300, A, true, V),
        ],
    );
    assert_eq!(charged(&w, A), 200);
    assert_eq!(a.missed_switches(), 0);
}

#[test]
fn reconcile_tops_up_what_a_missing_switch_dropped() {
    // V is woken on idle CPU 1 twice; the second switch idle -> V is not
    // traced, so its 30 ns of wait is dropped. schedstat counted 20 + 30.
    let mut a = agg();
    a.apply(&sw(1, 0, A, false, 0));
    a.reconcile(10, &[(V, 1_000)]);
    let w = run(
        &mut a,
        &[
            wake(100, V, 1),
            sw(1, 120, 0, false, V),
            sw(1, 500, V, false, 0),
            wake(600, V, 1),
            sw(1, 900, V, false, 0),
        ],
    );
    assert_eq!((w.idle_ns, w.unknown_ns), (20, 0), "{w:?}");
    a.reconcile(1_000, &[(V, 1_050)]);
    let w = waits(&a).remove(&V).unwrap();
    assert_eq!((w.idle_ns, w.unknown_ns, w.wait_ns()), (20, 30, 50));
    // Read again with nothing new: nothing is added twice.
    a.reconcile(1_100, &[(V, 1_050)]);
    assert_eq!(waits(&a)[&V].unknown_ns, 30);
}

#[test]
fn reconcile_leaves_a_trace_that_holds_more_and_an_open_episode_alone() {
    // The trace stamps switches after the pick: it charges a little more
    // than schedstat. An episode still open at the reading is not yet in
    // schedstat either. Neither is a shortfall.
    let mut a = agg();
    a.apply(&sw(1, 0, A, false, 0));
    a.reconcile(10, &[(V, 0)]);
    for e in [
        wake(100, V, 1),
        sw(1, 150, 0, false, V),
        sw(1, 200, V, true, A),
    ] {
        a.apply(&e);
    }
    // Closed: 50 in the trace, 45 in schedstat; open: 800 behind A.
    a.reconcile(1_000, &[(V, 45)]);
    let w = waits(&a).remove(&V).unwrap();
    assert_eq!((w.idle_ns, charged(&w, A), w.unknown_ns), (50, 800, 0));
    // A thread never reconciled before only sets its base.
    a.watch(&[V, B]);
    a.reconcile(1_100, &[(V, 45), (B, 5_000)]);
    assert_eq!(waits(&a)[&B].unknown_ns, 0);
}

/// CPU 1 goes idle, V is woken onto it at 50 and A at 100; then `rest`.
/// V's (idle, A, unknown) charges and the aggregator.
fn woken_onto_idle(rest: &[Event]) -> ((u64, u64, u64), ThreadWaits, Aggregator) {
    let mut a = agg();
    let mut evs = vec![sw(1, 0, B, false, 0), wake(50, V, 1), wake(100, A, 1)];
    evs.extend_from_slice(rest);
    let w = run(&mut a, &evs);
    ((w.idle_ns, charged(&w, A), w.unknown_ns), w, a)
}

#[test]
fn a_missing_switch_to_a_woken_thread_charges_it_not_unknown() {
    // idle -> A is not traced; V waits for A until A switches to it.
    let (split, w, a) = woken_onto_idle(&[sw(1, 500, A, false, V)]);
    // 50 ns of idle before A's wake-up, then A's 400 ns.
    assert_eq!(split, (50, 400, 0), "{w:?}");
    assert_eq!((w.episodes.count, w.episodes.sum_ns), (1, 450));
    assert_eq!(a.missed_switches(), 1);
    let (c, _) = w.by_thread.iter().find(|(c, _)| c.tid == A).unwrap();
    assert_eq!(c.comm.as_str(), "t200");
}

#[test]
fn a_traced_switch_from_idle_keeps_the_wait_before_it_idle() {
    // The same, with idle -> A traced at 300: idle until then, A after.
    let (split, w, a) = woken_onto_idle(&[sw(1, 300, 0, false, A), sw(1, 500, A, false, V)]);
    assert_eq!(split, (250, 200, 0), "{w:?}");
    assert_eq!(a.missed_switches(), 0);
}

#[test]
fn a_missing_switch_to_another_than_the_woken_stays_unknown() {
    // B turns out to have run, not A: what V was charged since the last
    // switch is unknown, as before.
    let (split, w, _) = woken_onto_idle(&[sw(1, 500, B, false, V)]);
    assert_eq!(split, (0, 0, 450), "{w:?}");
}

/// Identities that change between calls, as a reused tid's do: tgid =
/// 1000 + how many times it was asked.
struct Counting(u32);
impl Identify for Counting {
    fn identify(&mut self, _tid: u32) -> (u32, bool) {
        self.0 += 1;
        (1000 + self.0, false)
    }
}

// Issue 29: the (tid, comm) cache kept a dead thread's tgid for whoever
// got its tid next (a new VM's `CPU 0/KVM` named as the old one). After
// forget_identities (each read) the same (tid, comm) is asked again.
#[test]
fn a_reused_tid_is_identified_again_after_a_read() {
    let mut a = Aggregator::with_identity(Box::new(Counting(0)));
    a.watch(&[V]);
    a.apply(&sw(1, 0, V, true, A));
    a.apply(&sw(1, 50, A, true, V));
    a.apply(&sw(1, 60, V, true, A));
    a.apply(&sw(1, 70, A, true, V));
    let tgids =
        |a: &Aggregator| -> Vec<u32> { waits(a)[&V].by_thread.keys().map(|c| c.tgid).collect() };
    assert_eq!(tgids(&a), [1001], "cached within an interval");
    a.forget_identities();
    a.apply(&sw(1, 80, V, true, A));
    a.apply(&sw(1, 90, A, true, V));
    assert_eq!(tgids(&a), [1001, 1002], "the tid's new owner");
}
