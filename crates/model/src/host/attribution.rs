//! Who stole it: each vCPU's run-queue wait split by what ran on its CPU
//! while it waited, from two readings of the scheduler-event collector
//! (host::sched_store), named with what VM discovery knows. Pure: no I/O.
//!
//! Kinds: `vcpu` (a vCPU thread of a VM, named by the VM; the victim's own
//! VM included), `vmm` (a VM's other threads), `host-kthread` (by class:
//! kworker, ksoftirqd, migration, ...), `host-process` (comm and pid), `irq`
//! (hard and soft interrupt time), `unknown`: name `idle` for time the CPU
//! ran its idle task while the vCPU was queued (wake-up latency: nothing
//! else ran, the vCPU was not yet switched in), name `untraced` for time no
//! record covers.

use super::observation::{HostObservation, VmObs};
use super::sched_store::{StoredSched, StoredThread};
use serde::Serialize;
use std::collections::BTreeMap;
use stealscope_who::{Charge, Culprit, Kind, SchedSample, Thread, ThreadWaits};

/// The vCPU's wait episodes over the interval (enqueue to switch-in).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitEpisodes {
    pub count: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: Option<f64>,
    pub over_1ms: u64,
    pub over_10ms: u64,
}

/// Which route attributed the wait, or why none did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttributionStatus {
    /// "bpf", "tracefs" or "none".
    pub route: &'static str,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_events: Option<u64>,
    /// Context switches the trace left out (tracefs route), found by the
    /// next switch on the CPU; the wait they hid is charged as unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_switches: Option<u64>,
    /// Wait stretches older than the BPF route's per-CPU record (charged
    /// as unknown): counted, never hidden.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overflows: Option<u64>,
    /// Routes tried before this one and why each could not start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<String>,
}

impl Default for AttributionStatus {
    fn default() -> Self {
        AttributionStatus {
            route: "none",
            reason: "no VMs".into(),
            events: None,
            lost_events: None,
            missed_switches: None,
            overflows: None,
            fallbacks: Vec::new(),
        }
    }
}

impl AttributionStatus {
    pub fn available(&self) -> bool {
        self.route != "none"
    }
}

/// One culprit over all vCPUs of the host: its charge (share: of all vCPU
/// wait on the host) and who it made wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CulpritShare {
    #[serde(flatten)]
    pub charge: Charge,
    /// VMs whose vCPUs waited for it, most wait first.
    pub victims: Vec<String>,
    /// A host process's threads that held the CPUs (it is named by its
    /// process, threads folded in), most first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadShare>,
}

/// One thread of a host-process culprit: its own comm and the vCPU wait
/// charged to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadShare {
    pub comm: String,
    pub seconds: f64,
}

/// Name of the culprit of kind [`Kind::Own`] (stealscope's own threads:
/// left out of the culprits and shown once, as the tool's own cost).
pub const OWN_NAME: &str = "stealscope";

/// What names a host-process culprit: its process's comm (threads such as
/// rustc's "coordinator" fold into it), and which process is stealscope
/// itself.
#[derive(Debug, Clone, Default)]
pub struct ProcNames {
    /// Process comm by tgid.
    pub comms: BTreeMap<u32, String>,
    /// stealscope's own pid, when known.
    pub own: Option<u32>,
}

impl ProcNames {
    /// From the processes a host side read, and its own pid.
    pub fn of(obs: &[&HostObservation]) -> ProcNames {
        let mut n = ProcNames::default();
        for o in obs {
            n.own = n.own.or(o.own_pid);
            for p in &o.procs {
                n.comms.entry(p.pid).or_insert_with(|| p.comm.clone());
            }
        }
        n
    }

    /// For a live view: stealscope is this process; a process is named by
    /// its comm at the reading ([`SchedSample::procs`]), else (it exited)
    /// by its main thread's comm when the reading saw it, else by the
    /// thread.
    pub fn live(sample: &SchedSample) -> ProcNames {
        let mut n = ProcNames {
            own: Some(std::process::id()),
            ..ProcNames::default()
        };
        for c in sample.threads.values().flat_map(|w| w.by_thread.keys()) {
            if c.tid == c.tgid {
                n.comms.entry(c.tgid).or_insert_with(|| c.comm.to_string());
            }
        }
        n.comms
            .extend(sample.procs.iter().map(|(p, c)| (*p, c.clone())));
        n
    }

    fn comm<'a>(&'a self, c: &'a Thread) -> &'a str {
        self.comms
            .get(&c.tgid)
            .map_or(c.comm.as_str(), String::as_str)
    }
}

/// Per-vCPU attribution (by tid) and the host's culprits.
#[derive(Debug, Clone, Default)]
pub struct Attribution {
    pub status: AttributionStatus,
    /// Each vCPU's charges (shares: of its attributed wait).
    pub by_tid: BTreeMap<u32, (Vec<Charge>, WaitEpisodes)>,
    /// Every culprit but stealscope itself, most first.
    pub culprits: Vec<CulpritShare>,
    /// vCPU wait charged to stealscope's own threads, seconds.
    pub own_wait_s: f64,
}

/// Class of a kernel thread by its comm: the name without its CPU, unit or
/// instance suffix ("kworker/3:1H" -> kworker, "irq/24-nvme0q1" -> irq-thread).
pub fn kthread_class(comm: &str) -> String {
    if comm.starts_with("rcu") {
        return "rcu".into();
    }
    if comm.starts_with("irq/") {
        return "irq-thread".into();
    }
    let head = comm.split(['/', '.', ':']).next().unwrap_or(comm);
    let stem = head.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.is_empty() {
        comm.to_string()
    } else {
        stem.to_string()
    }
}

/// A culprit's VM as naming needs it: name, pid, and whether the culprit
/// thread is one of its vCPUs.
pub(crate) type VmOf<'a> = Option<(&'a str, u32, bool)>;

/// Names a culprit: a thread of a VM (`vcpu` or `vmm`), else stealscope
/// itself ([`Kind::Own`]), else a kernel thread class, else a host process
/// by its process's comm.
pub(crate) fn classify_with(c: &Thread, vm: VmOf, names: &ProcNames) -> Culprit {
    if let Some((name, pid, vcpu)) = vm {
        let kind = if vcpu { Kind::Vcpu } else { Kind::Vmm };
        return Culprit {
            vm: Some(name.to_string()),
            pid: Some(pid),
            ..Culprit::new(kind, name)
        };
    }
    let (kind, name, pid) = if names.own == Some(c.tgid) {
        (Kind::Own, OWN_NAME.to_string(), Some(c.tgid))
    } else if c.kthread {
        (Kind::HostKthread, kthread_class(&c.comm), None)
    } else {
        (Kind::HostProcess, names.comm(c).to_string(), Some(c.tgid))
    };
    Culprit {
        pid,
        ..Culprit::new(kind, name)
    }
}

fn classify(c: &Thread, vms: &[&VmObs], names: &ProcNames) -> Culprit {
    let vm = vms.iter().find(|v| v.pid == c.tgid).map(|vm| {
        let vcpu = vm.vcpus.iter().any(|(_, t)| t.tid == c.tid);
        (vm.name.as_str(), vm.pid, vcpu)
    });
    classify_with(c, vm, names)
}

/// One vCPU's wait over an interval (`w`, already a difference of two
/// readings) by culprit, interrupt, idle and untraced time included.
pub(crate) fn charges(
    w: &ThreadWaits,
    name: impl Fn(&Thread) -> Culprit,
) -> BTreeMap<Culprit, u64> {
    let mut by: BTreeMap<Culprit, u64> = BTreeMap::new();
    for (c, &ns) in &w.by_thread {
        *by.entry(name(c)).or_default() += ns;
    }
    let extra = [
        (Culprit::irq(), w.irq_ns),
        (Culprit::idle(), w.idle_ns),
        (Culprit::untraced(), w.unknown_ns),
    ];
    for (k, ns) in extra {
        if ns > 0 {
            *by.entry(k).or_default() += ns;
        }
    }
    by
}

/// Charges as rows, most seconds first, each with its share of the total.
pub(crate) fn wait_by_rows(by: &BTreeMap<Culprit, u64>) -> Vec<Charge> {
    let total = by.values().sum::<u64>();
    let mut rows: Vec<Charge> = by
        .iter()
        .map(|(k, &ns)| Charge::of(k.clone(), ns, total))
        .collect();
    rows.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    rows
}

fn episodes(w: &ThreadWaits) -> WaitEpisodes {
    let h = &w.episodes;
    let us = |ns: Option<u64>| ns.map(|v| (v as f64 / 1000.0 * 10.0).round() / 10.0);
    WaitEpisodes {
        count: h.count,
        p50_us: us(h.quantile(0.5)),
        p99_us: us(h.quantile(0.99)),
        max_us: us((h.count > 0).then_some(h.max_ns)),
        over_1ms: h.over_1ms,
        over_10ms: h.over_10ms,
    }
}

/// A thread's schedstat wait over the collector's interval, as a bracket
/// (ns): at least the wait between the reads inside the two readings, at
/// most the one between the reads outside them (the same for both when
/// only the outside was stored, or from the two sides' thread times
/// without a collector reading).
fn schedstat_wait(t0: &HostObservation, t1: &HostObservation, tid: u32) -> Option<(u64, u64)> {
    if let (Some(a), Some(b)) = (stored_thread(t0, tid), stored_thread(t1, tid)) {
        if let (Some(a0), Some(b0)) = (a.schedstat, b.schedstat) {
            let outside = b0[1].saturating_sub(a0[1]);
            let inside = match (a.schedstat_inside, b.schedstat_inside) {
                (Some(ai), Some(bi)) => bi[1].saturating_sub(ai[1]).min(outside),
                _ => outside,
            };
            return Some((inside, outside));
        }
    }
    let side = |o: &HostObservation| {
        o.vms
            .iter()
            .flat_map(|v| &v.vcpus)
            .find(|(_, x)| x.tid == tid)
            .and_then(|(_, x)| x.sched)
            .map(|s| s.wait_ns)
    };
    let w = side(t1)?.saturating_sub(side(t0)?);
    Some((w, w))
}

/// Thread `tid` in a side's collector reading.
fn stored_thread(o: &HostObservation, tid: u32) -> Option<&StoredThread> {
    match o.sched.as_ref()? {
        StoredSched::Sample(x) => x.threads.iter().find(|t| t.tid == tid),
        StoredSched::Unavailable { .. } => None,
    }
}

fn sample(s: Option<&StoredSched>, side: &str) -> Result<SchedSample, String> {
    match s {
        None => Err(format!(
            "no scheduler-event reading at {side} (taken without the collector)"
        )),
        Some(StoredSched::Unavailable { unavailable }) => Err(unavailable.join("; ")),
        Some(StoredSched::Sample(s)) => s.to_sample().map_err(|e| format!("{side}: {e}")),
    }
}

fn status(s0: &SchedSample, s1: &SchedSample, t1: &HostObservation) -> AttributionStatus {
    let lost = s1.stats.lost_events.saturating_sub(s0.stats.lost_events);
    AttributionStatus {
        route: s1.route.as_str(),
        reason: if s1.stats.unwatched > 0 {
            format!(
                "{} threads not watched (the collector's map is full): their wait is not attributed",
                s1.stats.unwatched
            )
        } else if lost > 0 {
            format!("{lost} scheduler events lost: some wait is charged as unknown")
        } else {
            "all vCPU threads watched".into()
        },
        events: Some(s1.stats.events.saturating_sub(s0.stats.events)),
        lost_events: Some(lost),
        missed_switches: Some(
            s1.stats
                .missed_switches
                .saturating_sub(s0.stats.missed_switches),
        ),
        overflows: Some(s1.stats.overflows.saturating_sub(s0.stats.overflows)),
        fallbacks: stored_fallbacks(t1.sched.as_ref()),
    }
}

/// Host-wide sums while walking the vCPUs: per culprit its ns, ns by
/// victim VM, and (host processes) ns by thread comm.
#[derive(Default)]
struct HostSums {
    by: BTreeMap<Culprit, (u64, BTreeMap<String, u64>)>,
    threads: BTreeMap<Culprit, BTreeMap<String, u64>>,
}

impl HostSums {
    fn add(&mut self, vm: &str, by: &BTreeMap<Culprit, u64>) {
        for (k, &ns) in by {
            let e = self.by.entry(k.clone()).or_default();
            e.0 += ns;
            *e.1.entry(vm.to_string()).or_default() += ns;
        }
    }

    fn add_threads(&mut self, w: &ThreadWaits, name: impl Fn(&Thread) -> Culprit) {
        for (c, &ns) in &w.by_thread {
            let k = name(c);
            if k.kind == Kind::HostProcess {
                *self
                    .threads
                    .entry(k)
                    .or_default()
                    .entry(c.comm.to_string())
                    .or_default() += ns;
            }
        }
    }

    /// Culprits but stealscope itself, most first, and the wait charged
    /// to stealscope.
    fn culprits(self) -> (Vec<CulpritShare>, f64) {
        let all = self.by.values().map(|v| v.0).sum::<u64>();
        let mut threads = self.threads;
        let mut own = 0;
        let mut out = Vec::new();
        for (k, (ns, victims)) in self.by {
            if k.kind == Kind::Own {
                own += ns;
                continue;
            }
            let mut v: Vec<(String, u64)> = victims.into_iter().collect();
            v.sort_by_key(|x| std::cmp::Reverse(x.1));
            let mut t: Vec<ThreadShare> = threads
                .remove(&k)
                .unwrap_or_default()
                .into_iter()
                .map(|(comm, ns)| ThreadShare {
                    comm,
                    seconds: ns as f64 / 1e9,
                })
                .collect();
            t.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
            out.push(CulpritShare {
                charge: Charge::of(k, ns, all),
                victims: v.into_iter().map(|x| x.0).collect(),
                threads: t,
            });
        }
        out.sort_by(|a, b| b.charge.seconds.total_cmp(&a.charge.seconds));
        (out, own as f64 / 1e9)
    }
}

/// The routes a stored reading says were tried before its own.
fn stored_fallbacks(s: Option<&StoredSched>) -> Vec<String> {
    match s {
        Some(StoredSched::Sample(x)) => x.fallbacks.clone(),
        _ => Vec::new(),
    }
}

/// Splits every vCPU's wait between t0 and t1 by culprit.
pub fn attribute(t0: &HostObservation, t1: &HostObservation) -> Attribution {
    let mut out = Attribution::default();
    if t1.vms.is_empty() {
        return out;
    }
    let (s0, s1) = match (
        sample(t0.sched.as_ref(), "t0"),
        sample(t1.sched.as_ref(), "t1"),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            out.status.reason = e;
            return out;
        }
    };
    out.status = status(&s0, &s1, t1);
    // Culprits that exited during the interval are named from t0.
    let vms: Vec<&VmObs> = t1.vms.iter().chain(t0.vms.iter()).collect();
    let names = ProcNames::of(&[t1, t0]);
    let name = |c: &Thread| classify(c, &vms, &names);
    let mut host = HostSums::default();
    let mut disagree: Vec<String> = Vec::new();
    for vm in &t1.vms {
        for (_, t) in &vm.vcpus {
            let Some(w1) = s1.threads.get(&t.tid) else {
                continue;
            };
            let w = match s0.threads.get(&t.tid) {
                Some(w0) => w1.since(w0),
                None => w1.clone(),
            };
            let by = charges(&w, name);
            // A check, never a rewrite: schedstat's wait over the same
            // interval is an independent account of the sum.
            if let Some((lo, hi)) = schedstat_wait(t0, t1, t.tid) {
                let sum: u64 = by.values().sum();
                let off = sum.saturating_sub(hi).max(lo.saturating_sub(sum));
                if off > hi / 50 + 1_000_000 {
                    disagree.push(format!(
                        "{} tid {}: {:.3} s vs {:.3} s",
                        vm.name,
                        t.tid,
                        sum as f64 / 1e9,
                        if sum > hi { hi } else { lo } as f64 / 1e9
                    ));
                }
            }
            host.add(&vm.name, &by);
            host.add_threads(&w, name);
            out.by_tid.insert(t.tid, (wait_by_rows(&by), episodes(&w)));
        }
    }
    if !disagree.is_empty() {
        out.status.reason = format!(
            "{}; attributed wait differs from schedstat's by more than 2% for {} vCPU(s) \
             ({})",
            out.status.reason,
            disagree.len(),
            disagree.join(", ")
        );
    }
    (out.culprits, out.own_wait_s) = host.culprits();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A side whose collector reading holds one thread with schedstat wait
    /// `outside` (and `inside`) ns.
    fn side(outside: u64, inside: Option<u64>) -> HostObservation {
        let mut s = StoredSched::from(&SchedSample {
            route: stealscope_who::Route::Bpf,
            monotonic_ns: 0,
            threads: [(
                7,
                stealscope_who::ThreadWaits {
                    tid: 7,
                    ..Default::default()
                },
            )]
            .into_iter()
            .collect(),
            stats: Default::default(),
            procs: Default::default(),
        });
        if let StoredSched::Sample(x) = &mut s {
            x.threads[0].schedstat = Some([0, outside, 0]);
            x.threads[0].schedstat_inside = inside.map(|w| [0, w, 0]);
        }
        HostObservation {
            sched: Some(s),
            ..Default::default()
        }
    }

    #[test]
    fn schedstat_brackets_the_collectors_interval_from_inside_and_outside() {
        // Outside: 100 -> 3,000; inside: 400 -> 1,300 (a wait ended
        // between each outside read and the collector's).
        let (t0, t1) = (side(100, Some(400)), side(3_000, Some(1_300)));
        assert_eq!(schedstat_wait(&t0, &t1, 7), Some((900, 2_900)));
        // Snapshots from before the inside read: the outside alone.
        let (t0, t1) = (side(100, None), side(3_000, Some(1_300)));
        assert_eq!(schedstat_wait(&t0, &t1, 7), Some((2_900, 2_900)));
        assert_eq!(schedstat_wait(&t0, &t1, 8), None);
    }

    #[test]
    fn kthread_classes() {
        for (comm, class) in [
            ("kworker/3:1H", "kworker"),
            ("kworker/u8:2-events_unbound", "kworker"),
            ("ksoftirqd/0", "ksoftirqd"),
            ("migration/1", "migration"),
            ("kswapd0", "kswapd"),
            ("kcompactd0", "kcompactd"),
            ("khugepaged", "khugepaged"),
            ("rcu_preempt", "rcu"),
            ("rcuop/3", "rcu"),
            ("kdamond.0", "kdamond"),
            ("irq/24-nvme0q1", "irq-thread"),
            ("cpuhp/2", "cpuhp"),
        ] {
            assert_eq!(kthread_class(comm), class, "{comm}");
        }
    }

    #[test]
    fn a_live_process_is_named_by_its_process_now() {
        use stealscope_who::{Route, SchedStats, ThreadWaits};
        let c = |tid: u32, tgid: u32, comm: &str| Thread {
            tid,
            tgid,
            comm: comm.into(),
            kthread: false,
        };
        let waits = ThreadWaits {
            tid: 1,
            // The loop before and after an exec, a worker thread of a
            // process whose main thread never ran, one that exited.
            by_thread: [
                (c(10, 10, "soakA"), 5),
                (c(10, 10, "soakB"), 5),
                (c(21, 20, "coordinator"), 5),
                (c(30, 30, "gone"), 5),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let sample = SchedSample {
            route: Route::Bpf,
            monotonic_ns: 0,
            threads: [(1, waits)].into_iter().collect(),
            stats: SchedStats::default(),
            procs: [(10, "soakA".to_string()), (20, "rustc".to_string())]
                .into_iter()
                .collect(),
        };
        let n = ProcNames::live(&sample);
        assert_eq!(n.comm(&c(10, 10, "soakB")), "soakA");
        assert_eq!(n.comm(&c(21, 20, "coordinator")), "rustc");
        assert_eq!(n.comm(&c(30, 30, "gone")), "gone");
    }
}
