//! The tracefs route's charging: [`Aggregator`] applies the attribution
//! rules of docs/who-stole.md, section "Rules" (R1-R9, cited by number
//! below), to the decoded events in timestamp order. The BPF program
//! (bpf/wait_by.bpf.c) applies the same rules in the kernel; the live test
//! crates/sched/tests/two_routes.rs runs both at once and compares them.
//!
//! What only this route needs (R8, R7):
//! - Events lost on c ([`Event::Lost`]) make c's current unknown until its
//!   next switch, a watched thread that was running there unknown until it
//!   is seen again, and every queued watched thread uncertain: its time
//!   goes to `unknown` until it is seen again, and that episode is not
//!   recorded.
//! - Charges on c since its last switch stay pending until the next switch
//!   there, which confirms them or, when its `prev` is not c's current,
//!   revises them by R6 (`Aggregator::confirm`): a charge here is final
//!   only at the next switch, unlike the BPF program's.
//! - Trace records carry no run-queue clock: what the kernel's `run_delay`
//!   holds beyond the closed episodes' charges goes to `unknown`
//!   ([`Aggregator::reconcile`]).
//! - A switch ends c's interrupt time: no switch happens inside a handler,
//!   so a lost exit cannot charge irq forever.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use stealscope_who::hist::HistPacker;
use stealscope_who::waits::{Thread, ThreadWaits};

pub use crate::event::{Comm, Event};

/// Thread-group id and kernel-thread flag of a culprit, which `sched_switch`
/// does not carry.
pub trait Identify: Send {
    /// (tgid, kthread) of `tid`.
    fn identify(&mut self, tid: u32) -> (u32, bool);
}

/// Reads /proc/<tid>/status (Tgid) and /proc/<tid>/stat (flags, PF_KTHREAD)
/// once per (tid, comm) seen as a culprit in an interval
/// ([`Aggregator::forget_identities`]).
pub struct ProcIdentity {
    root: PathBuf,
}

const PF_KTHREAD: u64 = 0x0020_0000;

impl ProcIdentity {
    pub fn new(proc_root: impl Into<PathBuf>) -> ProcIdentity {
        ProcIdentity {
            root: proc_root.into(),
        }
    }
}

impl Identify for ProcIdentity {
    fn identify(&mut self, tid: u32) -> (u32, bool) {
        let dir = self.root.join(tid.to_string());
        let tgid = std::fs::read_to_string(dir.join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse().ok())
            });
        // Field 9 (flags) counts from after the comm's closing parenthesis.
        let kthread = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| {
                let rest = &s[s.rfind(')')? + 1..];
                rest.split_whitespace().nth(6)?.parse::<u64>().ok()
            })
            .is_some_and(|f| f & PF_KTHREAD != 0);
        // A thread gone before we looked: its tid stands for its group and
        // the kthread flag is unknown, so it is taken as a user thread.
        (tgid.unwrap_or(tid), kthread)
    }
}

/// What a CPU is running, as far as the events tell.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Current {
    Unknown,
    Idle,
    /// Idle, and this thread was woken onto the CPU since: it runs next
    /// unless a traced switch says otherwise (see `confirm`).
    Woken(u32),
    Task(u32, Comm),
}

#[derive(Debug, Clone)]
struct Cpu {
    current: Current,
    /// In a hard interrupt timed by R5 (entered while a watched thread was
    /// queued here).
    hard: bool,
    /// In a softirq timed by R5. A hardirq inside a softirq is one stretch
    /// of irq, not two.
    soft: bool,
    /// Watched threads queued here.
    queued: Vec<u32>,
    /// What was charged here since the last switch on this CPU: the next
    /// switch confirms it (its `prev` is `current`) or revokes it.
    pending: Vec<(u32, Target, u64)>,
    /// Threads woken onto this CPU while idle since its last switch, in
    /// order.
    woken: Vec<u32>,
}

impl Default for Cpu {
    fn default() -> Self {
        Cpu {
            current: Current::Unknown,
            hard: false,
            soft: false,
            queued: Vec::new(),
            pending: Vec::new(),
            woken: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Not seen since it was watched (or since events were lost).
    Unknown,
    Sleeping,
    Running {
        cpu: u32,
    },
    /// Queued on `cpu` since `since` (episode start), charged up to
    /// `charged`; `uncertain` once events were lost while it was queued
    /// (it may have run and slept unseen: its time goes to unknown).
    Queued {
        cpu: u32,
        since: u64,
        charged: u64,
        uncertain: bool,
    },
}

struct Watched {
    state: State,
    waits: ThreadWaits,
    /// Charged in the episode still open (schedstat adds an episode only
    /// when it ends).
    open_ns: u64,
    /// The kernel's own count, for [`Aggregator::reconcile`].
    kernel: Kernel,
}

/// What the kernel counted against what the trace charged.
#[derive(Default)]
struct Kernel {
    /// run_delay and closed charges at the first reconciliation.
    base: Option<(u64, u64)>,
    /// Added to `unknown_ns` so far: the largest shortfall seen.
    topped: u64,
}

/// Most (tid, comm) identities kept before the cache starts over.
const IDENTITY_CACHE: usize = 16384;

/// The charging rules over a stream of events in timestamp order.
pub struct Aggregator {
    cpus: Vec<Cpu>,
    threads: HashMap<u32, Watched>,
    ident: Box<dyn Identify>,
    culprits: HashMap<(u32, Comm), Thread>,
    /// Latest time applied; earlier timestamps are taken as this one.
    now: u64,
    events: u64,
    missed_switches: u64,
}

impl Aggregator {
    /// Culprits identified from /proc.
    pub fn new() -> Aggregator {
        Aggregator::with_identity(Box::new(ProcIdentity::new("/proc")))
    }

    pub fn with_identity(ident: Box<dyn Identify>) -> Aggregator {
        Aggregator {
            cpus: Vec::new(),
            threads: HashMap::new(),
            ident,
            culprits: HashMap::new(),
            now: 0,
            events: 0,
            missed_switches: 0,
        }
    }

    /// Replaces the watched set; threads that stay keep their counters.
    pub fn watch(&mut self, tids: &[u32]) {
        self.threads.retain(|tid, _| tids.contains(tid));
        for c in &mut self.cpus {
            c.queued.retain(|t| tids.contains(t));
        }
        for &tid in tids {
            self.threads.entry(tid).or_insert_with(|| Watched {
                open_ns: 0,
                kernel: Kernel::default(),
                state: State::Unknown,
                waits: ThreadWaits {
                    tid,
                    ..ThreadWaits::default()
                },
            });
        }
    }

    /// The watched threads, ascending.
    pub fn watched(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.threads.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Events applied so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Switches found missing: a `sched_switch` whose `prev` was not what
    /// the CPU's last switch put there.
    /// Forgets every culprit's identity (tgid, kthread), so the next
    /// charge to a (tid, comm) reads /proc again: a tid reused since, with
    /// the same comm (a new VM's `CPU 0/KVM`), gets its new process's tgid
    /// instead of the dead one's. The tracefs route calls it at each read,
    /// so an identity is at most one interval old (an exec changes the
    /// comm, which is part of the key already).
    pub fn forget_identities(&mut self) {
        self.culprits.clear();
    }

    pub fn missed_switches(&self) -> u64 {
        self.missed_switches
    }

    /// Cumulative waits of every watched thread, charged up to the last
    /// event or [`Aggregator::advance`], histograms packed by `packer`.
    pub fn waits(&self, packer: &mut HistPacker) -> BTreeMap<u32, ThreadWaits> {
        self.threads
            .iter()
            .map(|(&tid, w)| {
                let w = &w.waits;
                let t = ThreadWaits {
                    tid: w.tid,
                    by_thread: w.by_thread.clone(),
                    irq_ns: w.irq_ns,
                    idle_ns: w.idle_ns,
                    unknown_ns: w.unknown_ns,
                    episodes: packer.repack(&w.episodes),
                };
                (tid, t)
            })
            .collect()
    }

    /// Charges every queued thread up to `ts` (no event between the last one
    /// and `ts`, as the reader knows after draining every CPU).
    pub fn advance(&mut self, ts: u64) {
        let t = self.clock(ts);
        for cpu in 0..self.cpus.len() as u32 {
            self.settle(cpu, t);
        }
    }

    /// Tops up `unknown` with wait the kernel counted and the trace did
    /// not show. `run_delay` is each watched thread's schedstat wait, read
    /// before `ts` was: every episode in it has its switch-in stamped
    /// before `ts`, so once the events up to `ts` are applied the trace's
    /// closed episodes can only hold more (their stamps come after the
    /// pick), never less, unless switches were missing (6.18 drops some
    /// switches away from the idle task: the woken thread's wait is then
    /// dropped, see `confirm`). The first call sets each thread's base.
    pub fn reconcile(&mut self, ts: u64, run_delay: &[(u32, u64)]) {
        self.advance(ts);
        for &(tid, rd) in run_delay {
            let Some(w) = self.threads.get_mut(&tid) else {
                continue;
            };
            let open = match w.state {
                State::Queued { .. } => w.open_ns,
                _ => 0,
            };
            let closed = w.waits.wait_ns().saturating_sub(open + w.kernel.topped);
            let Some((rd0, closed0)) = w.kernel.base else {
                w.kernel.base = Some((rd, closed));
                continue;
            };
            let short = rd
                .saturating_sub(rd0)
                .saturating_sub(closed.saturating_sub(closed0));
            if short > w.kernel.topped {
                w.waits.unknown_ns += short - w.kernel.topped;
                w.kernel.topped = short;
            }
        }
    }

    pub fn apply(&mut self, ev: &Event) {
        self.events += 1;
        let t = self.clock(ev.ts());
        match *ev {
            Event::Switch {
                cpu,
                prev_tid,
                prev_comm,
                prev_runnable,
                next_tid,
                next_comm,
                ..
            } => {
                let prev = (prev_tid, prev_comm);
                self.switch(cpu, t, prev, prev_runnable, next_tid, next_comm)
            }
            Event::Wakeup {
                tid, target_cpu, ..
            } => {
                self.woken_on(target_cpu, tid, t);
                if let Some(w) = self.threads.get(&tid) {
                    match w.state {
                        State::Unknown | State::Sleeping => self.enqueue(tid, target_cpu, t, t),
                        // It slept in a gap: a fresh episode starts here.
                        State::Queued {
                            uncertain: true, ..
                        } => {
                            self.unqueue(tid, t);
                            self.enqueue(tid, target_cpu, t, t);
                        }
                        _ => {}
                    }
                }
            }
            Event::Migrate { tid, dest_cpu, .. } => {
                if let Some(&Watched {
                    state:
                        State::Queued {
                            since, uncertain, ..
                        },
                    ..
                }) = self.threads.get(&tid)
                {
                    self.unqueue(tid, t);
                    self.enqueue(tid, dest_cpu, since, t);
                    self.set_uncertain(tid, uncertain);
                }
            }
            Event::IrqEnter { cpu, .. } => self.interrupt(cpu, t, true, true),
            Event::SoftirqEnter { cpu, .. } => self.interrupt(cpu, t, false, true),
            Event::IrqExit { cpu, .. } => self.interrupt(cpu, t, true, false),
            Event::SoftirqExit { cpu, .. } => self.interrupt(cpu, t, false, false),
            Event::Lost { cpu, .. } => {
                // Wake-ups and migrations of any thread may be among the
                // lost: every queued thread becomes uncertain.
                self.advance(t);
                let c = self.cpu(cpu);
                c.current = Current::Unknown;
                (c.hard, c.soft) = (false, false);
                c.pending.clear();
                c.woken.clear();
                for w in self.threads.values_mut() {
                    match &mut w.state {
                        State::Running { cpu: r } if *r == cpu => w.state = State::Unknown,
                        State::Queued { uncertain, .. } => *uncertain = true,
                        _ => {}
                    }
                }
            }
        }
    }

    fn clock(&mut self, ts: u64) -> u64 {
        self.now = self.now.max(ts);
        self.now
    }

    fn cpu(&mut self, cpu: u32) -> &mut Cpu {
        let i = cpu as usize;
        if self.cpus.len() <= i {
            self.cpus.resize_with(i + 1, Cpu::default);
        }
        &mut self.cpus[i]
    }

    /// R5: a hard (`hard`) or soft interrupt's entry (`enter`) or exit on
    /// `cpu`. Timed only from an entry seen while a watched thread is
    /// queued there; an exit ends its kind's time whatever the entry was.
    fn interrupt(&mut self, cpu: u32, t: u64, hard: bool, enter: bool) {
        self.settle(cpu, t);
        let c = self.cpu(cpu);
        let timed = enter && !c.queued.is_empty();
        if hard {
            c.hard = timed;
        } else {
            c.soft = timed;
        }
    }

    /// R6: a wake-up onto an idle CPU where a watched thread is queued
    /// makes the woken thread the provisional current, unless it was woken
    /// there since the last switch already.
    fn woken_on(&mut self, cpu: u32, tid: u32, t: u64) {
        let c = self.cpu(cpu);
        let idle = matches!(c.current, Current::Idle | Current::Woken(_));
        if tid == 0 || !idle || c.queued.is_empty() || c.woken.contains(&tid) {
            return;
        }
        self.settle(cpu, t);
        let c = self.cpu(cpu);
        c.woken.push(tid);
        c.current = Current::Woken(tid);
    }

    fn switch(
        &mut self,
        cpu: u32,
        t: u64,
        (prev, prev_comm): (u32, Comm),
        runnable: bool,
        next: u32,
        comm: Comm,
    ) {
        self.settle(cpu, t);
        self.confirm(cpu, prev, prev_comm);
        if self.threads.contains_key(&prev) && prev != 0 {
            // Queued while it was running means an event was missed: the
            // stretch so far stays charged, no episode is recorded.
            self.unqueue(prev, t);
            if runnable {
                self.enqueue(prev, cpu, t, t);
            } else if let Some(w) = self.threads.get_mut(&prev) {
                w.state = State::Sleeping;
            }
        }
        if next != 0 {
            let uncertain = matches!(
                self.threads.get(&next).map(|w| w.state),
                Some(State::Queued {
                    uncertain: true,
                    ..
                })
            );
            if let Some(since) = self.unqueue(next, t) {
                if let Some(w) = self.threads.get_mut(&next) {
                    // An episode with a gap in it has no known length.
                    if !uncertain {
                        w.waits.episodes.record(t.saturating_sub(since));
                    }
                }
            }
            if let Some(w) = self.threads.get_mut(&next) {
                w.state = State::Running { cpu };
            }
        }
        let c = self.cpu(cpu);
        (c.hard, c.soft) = (false, false);
        c.current = if next == 0 {
            Current::Idle
        } else {
            Current::Task(next, comm)
        };
    }

    /// R6: settles what was charged on `cpu` since its last switch, now
    /// that a switch shows `prev` was running there. When `prev` is not the
    /// current the last switch left, a switch to `prev` was not traced: the
    /// CPU ran other tasks, then `prev`, for unknown parts of that stretch.
    /// `prev`'s own charge is dropped (R7 makes it up from run_delay), the
    /// others' goes to `unknown`, interrupt time stays; when `prev` was
    /// woken onto the idle CPU since, the stretch after its wake-up is
    /// `prev`'s and the one before stays idle.
    fn confirm(&mut self, cpu: u32, prev: u32, prev_comm: Comm) {
        let Some(c) = self.cpus.get_mut(cpu as usize) else {
            return;
        };
        let pending = std::mem::take(&mut c.pending);
        let woken = std::mem::take(&mut c.woken);
        let missed = match c.current {
            Current::Unknown => false,
            Current::Idle | Current::Woken(_) => prev != 0,
            Current::Task(tid, _) => tid != prev,
        };
        if !missed {
            return;
        }
        // Where `prev` woke among the CPU's wake-ups, and the culprit it is
        // (none without its comm: then its share stays unknown).
        let order = |x: u32| woken.iter().position(|&w| w == x);
        let at = order(prev).filter(|_| prev_comm != Comm::default());
        let thief = at.map(|_| culprit(&mut self.culprits, self.ident.as_mut(), prev, prev_comm));
        self.missed_switches += 1;
        if let Some(Watched {
            state: State::Queued { uncertain, .. },
            ..
        }) = self.threads.get_mut(&prev)
        {
            // Its episode's end is not known.
            *uncertain = true;
        }
        for (tid, target, ns) in pending {
            let Some(w) = self.threads.get_mut(&tid) else {
                continue;
            };
            // Idle before `prev` was woken: it was.
            let before = match target {
                Target::Idle => true,
                Target::WokenIdle(y) => at.is_some_and(|at| order(y).is_some_and(|i| i < at)),
                _ => false,
            };
            // Interrupt time was interrupt time whoever ran (R6).
            if tid != prev && (target == Target::Irq || (at.is_some() && before)) {
                continue;
            }
            let waits = &mut w.waits;
            let from = match target {
                Target::Unknown => &mut waits.unknown_ns,
                Target::Idle | Target::WokenIdle(_) => &mut waits.idle_ns,
                Target::Irq => &mut waits.irq_ns,
                Target::Task(ctid, comm) => {
                    let culprit = culprit(&mut self.culprits, self.ident.as_mut(), ctid, comm);
                    match waits.by_thread.get_mut(&culprit) {
                        Some(v) => v,
                        None => continue,
                    }
                }
            };
            let ns = ns.min(*from);
            *from -= ns;
            if tid != prev {
                match (&thief, target) {
                    (Some(c), Target::WokenIdle(_)) => {
                        *waits.by_thread.entry(c.clone()).or_insert(0) += ns;
                    }
                    _ => waits.unknown_ns += ns,
                }
            } else {
                w.open_ns = w.open_ns.saturating_sub(ns);
            }
        }
        let w = &mut self.threads;
        for waits in w.values_mut().map(|w| &mut w.waits) {
            waits.by_thread.retain(|_, v| *v > 0);
        }
    }

    /// Queues a watched thread on `cpu` from `t` (episode begun at `since`).
    fn enqueue(&mut self, tid: u32, cpu: u32, since: u64, t: u64) {
        let Some(w) = self.threads.get_mut(&tid) else {
            return;
        };
        if since == t {
            w.open_ns = 0;
        }
        w.state = State::Queued {
            cpu,
            since,
            charged: t,
            uncertain: false,
        };
        let c = self.cpu(cpu);
        if !c.queued.contains(&tid) {
            c.queued.push(tid);
        }
    }

    fn set_uncertain(&mut self, tid: u32, v: bool) {
        if let Some(Watched {
            state: State::Queued { uncertain, .. },
            ..
        }) = self.threads.get_mut(&tid)
        {
            *uncertain = v;
        }
    }

    /// Charges a queued thread up to `t` and takes it off its queue; its
    /// episode start, if it was queued.
    fn unqueue(&mut self, tid: u32, t: u64) -> Option<u64> {
        let State::Queued { cpu, since, .. } = self.threads.get(&tid)?.state else {
            return None;
        };
        self.settle(cpu, t);
        self.cpu(cpu).queued.retain(|&q| q != tid);
        if let Some(w) = self.threads.get_mut(&tid) {
            w.state = State::Unknown;
        }
        Some(since)
    }

    /// Charges every thread queued on `cpu` up to `t` to what runs there.
    fn settle(&mut self, cpu: u32, t: u64) {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return;
        };
        if c.queued.is_empty() {
            return;
        }
        let target = if c.hard || c.soft {
            Target::Irq
        } else {
            match c.current {
                Current::Unknown => Target::Unknown,
                Current::Idle => Target::Idle,
                Current::Woken(tid) => Target::WokenIdle(tid),
                Current::Task(tid, comm) => Target::Task(tid, comm),
            }
        };
        let queued = c.queued.clone();
        let mut pending = std::mem::take(&mut self.cpus[cpu as usize].pending);
        for tid in queued {
            let Some(w) = self.threads.get_mut(&tid) else {
                continue;
            };
            let State::Queued {
                charged, uncertain, ..
            } = &mut w.state
            else {
                continue;
            };
            let ns = t.saturating_sub(*charged);
            *charged = (*charged).max(t);
            if ns == 0 {
                continue;
            }
            w.open_ns += ns;
            let waits = &mut w.waits;
            let to = if *uncertain { Target::Unknown } else { target };
            match pending.iter_mut().find(|p| p.0 == tid && p.1 == to) {
                Some(p) => p.2 += ns,
                None => pending.push((tid, to, ns)),
            }
            match to {
                Target::Unknown => waits.unknown_ns += ns,
                Target::Idle | Target::WokenIdle(_) => waits.idle_ns += ns,
                Target::Irq => waits.irq_ns += ns,
                Target::Task(ctid, comm) => {
                    let culprit = culprit(&mut self.culprits, self.ident.as_mut(), ctid, comm);
                    *waits.by_thread.entry(culprit).or_insert(0) += ns;
                }
            }
        }
        self.cpus[cpu as usize].pending = pending;
    }
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator::new()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Unknown,
    Idle,
    /// Idle while this thread was woken onto the CPU: idle until the next
    /// switch confirms it, the woken thread's if that switch was missed.
    WokenIdle(u32),
    Irq,
    Task(u32, Comm),
}

fn culprit(
    cache: &mut HashMap<(u32, Comm), Thread>,
    ident: &mut dyn Identify,
    tid: u32,
    comm: Comm,
) -> Thread {
    if let Some(c) = cache.get(&(tid, comm)) {
        return c.clone();
    }
    if cache.len() >= IDENTITY_CACHE {
        cache.clear();
    }
    let (tgid, kthread) = ident.identify(tid);
    let c = Thread {
        tid,
        tgid,
        comm: comm.as_string().into(),
        kthread,
    };
    cache.insert((tid, comm), c.clone());
    c
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
