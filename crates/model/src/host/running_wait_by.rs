//! Running per-VM "who stole it" counters for an exporter (`serve`): each
//! VM's vCPU wait by culprit, summed over successive pairs of
//! scheduler-event readings, and its vCPUs' wait episodes. Pure.
//!
//! Bounded cardinality without counters going backwards: the
//! [`TOP_CULPRITS`] largest culprits as their own series, the rest as one
//! `other` series ([`crate::sticky_top`]). So a VM has at most
//! `TOP_CULPRITS + 1` series, and each only ever grows.

use super::live_rows::vcpu_wait_by;
use super::vcpu_times::vm_labels;
use super::vcpu_times::{ScannedVmId, ThreadSample};
use super::ThreadRole;
use crate::sticky_top::StickyTop;
use std::collections::{BTreeMap, HashMap};
use stealscope_who::{Culprit, EpisodeHist, Kind, SchedSample};

/// Culprits shown per VM before the rest go to `other`.
pub const TOP_CULPRITS: usize = 5;

/// Upper bounds (seconds) of the exported wait-episode buckets. Episodes
/// are kept in log buckets 12.5 % wide; each counts under the first bound
/// at or above its bucket's upper end, so an episode up to 12.5 % below a
/// bound may count under the next one.
pub const EPISODE_BOUNDS_S: [f64; 12] = [
    10e-6, 50e-6, 100e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 1.0,
];

/// One VM's running counters.
#[derive(Debug, Clone)]
pub struct VmWaitBy {
    /// By [`Culprit::label`]: kind and name (the pid is left out to bound
    /// cardinality; the `host` report has it).
    culprits: StickyTop<Culprit>,
    /// Every wait episode of its vCPUs.
    pub episodes: EpisodeHist,
}

impl VmWaitBy {
    fn new(top: usize) -> VmWaitBy {
        VmWaitBy {
            culprits: StickyTop::new(top),
            episodes: EpisodeHist::default(),
        }
    }

    /// (label, seconds): the shown culprits, then [`Culprit::other`].
    pub fn series(&self) -> Vec<(Culprit, f64)> {
        let mut out: Vec<(Culprit, f64)> = self
            .culprits
            .shown()
            .into_iter()
            .map(|(l, ns)| (l.clone(), ns as f64 / 1e9))
            .collect();
        out.push((Culprit::other(), self.culprits.other() as f64 / 1e9));
        out
    }

    /// All wait charged so far, seconds.
    pub fn total_s(&self) -> f64 {
        self.culprits.total() as f64 / 1e9
    }
}

/// Episodes of `h` per exported bucket ([`EPISODE_BOUNDS_S`], then +Inf),
/// each counted once (the encoder makes them cumulative).
pub fn episode_buckets(h: &EpisodeHist) -> Vec<(f64, u64)> {
    buckets_at(h, &EPISODE_BOUNDS_S)
}

/// Episodes of `h` per upper bound in `bounds_s` (ascending seconds), then
/// +Inf, each counted once: under the first bound at or above its log
/// bucket's upper end.
pub fn buckets_at(h: &EpisodeHist, bounds_s: &[f64]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = bounds_s
        .iter()
        .chain([f64::INFINITY].iter())
        .map(|&b| (b, 0))
        .collect();
    for (i, c) in h.buckets() {
        let upper_s = stealscope_who::hist::upper(i) as f64 / 1e9;
        if let Some(b) = out.iter_mut().find(|b| b.0 >= upper_s) {
            b.1 += c;
        }
    }
    out
}

/// Each vCPU's wait by culprit between two readings with its VM's label
/// ([`vm_labels`]) and tid; a thread the scan does not place is skipped.
fn labelled_wait_by<'a, V: ScannedVmId>(
    before: &SchedSample,
    now: &SchedSample,
    vms: &[V],
    threads: &[ThreadSample],
    labels: &'a BTreeMap<u32, String>,
) -> Vec<(&'a String, u32, BTreeMap<Culprit, u64>)> {
    let pid_of: HashMap<u32, u32> = threads.iter().map(|t| (t.tid, t.pid)).collect();
    vcpu_wait_by(before, now, vms, threads)
        .into_iter()
        .filter_map(|(tid, by)| Some((labels.get(pid_of.get(&tid)?)?, tid, by)))
        .collect()
}

/// Every VM's counters, by its label ([`vm_labels`]).
#[derive(Debug, Clone)]
pub struct RunningWaitBy {
    pub top: usize,
    pub vms: BTreeMap<String, VmWaitBy>,
    /// Each vCPU thread's schedstat wait (ns) at the scan of the last
    /// reading counted: where the next span starts.
    scanned: HashMap<u32, u64>,
}

impl Default for RunningWaitBy {
    fn default() -> Self {
        RunningWaitBy {
            top: TOP_CULPRITS,
            vms: BTreeMap::new(),
            scanned: HashMap::new(),
        }
    }
}

/// The wait the kernel counted over a span (`wait_ns`, schedstat at two
/// scans) split by culprit in the proportions the collector charged over
/// its own span (`by`, two readings, each taken just before its scan), so
/// the parts add up to `wait_ns` exactly; with no charge at all it is
/// `unknown`/`untraced`. The two spans differ by how long a reading takes:
/// at 10,000 watched threads 0.1-0.6 s in a debug build, seconds on a
/// loaded host (issue 29's soak), which moved the sum of unscaled charges
/// off the schedstat wait of the same scrape by several percent either way.
fn to_schedstat(by: BTreeMap<Culprit, u64>, wait_ns: u64) -> Vec<(Culprit, u64)> {
    let charged: u64 = by.values().sum();
    if charged == 0 {
        return [(Culprit::untraced(), wait_ns)]
            .into_iter()
            .filter(|x| x.1 > 0)
            .collect();
    }
    // Cumulative rounding: the parts sum to wait_ns to the nanosecond.
    let (mut upto, mut given) = (0u128, 0u64);
    by.into_iter()
        .map(|(k, ns)| {
            upto += ns as u128;
            let until = (upto * wait_ns as u128 / charged as u128) as u64;
            let part = until - given;
            given = until;
            (k, part)
        })
        .collect()
}

impl RunningWaitBy {
    /// Charges `ns` of `vm`'s wait to a culprit ([`Culprit::label`]).
    pub fn add(&mut self, vm: &str, label: Culprit, ns: u64) {
        let top = self.top;
        self.vms
            .entry(vm.to_string())
            .or_insert_with(|| VmWaitBy::new(top))
            .culprits
            .add(label, ns);
    }

    /// Where the first span starts: the scan that followed the first
    /// reading (`threads`, its vCPU threads' schedstat).
    pub fn baseline(&mut self, threads: &[ThreadSample]) {
        self.scanned = vcpu_waits(threads);
    }

    /// Adds each vCPU's schedstat wait since the last counted scan (or
    /// [`Self::baseline`]) split by what the collector charged between
    /// two readings ([`to_schedstat`]), named with this host scan, so at
    /// every scrape a VM's culprit series grow by exactly its vCPUs' wait.
    /// VMs the scan no longer lists are dropped (their series vanish).
    pub fn push<V: ScannedVmId>(
        &mut self,
        before: &SchedSample,
        now: &SchedSample,
        vms: &[V],
        threads: &[ThreadSample],
    ) {
        let labels = vm_labels(vms);
        self.vms.retain(|l, _| labels.values().any(|x| x == l));
        let scanned = vcpu_waits(threads);
        for (vm, tid, by) in labelled_wait_by(before, now, vms, threads, &labels) {
            // A thread first seen by this scan (or a reused tid) has no span yet.
            let (Some(&w0), Some(&w1)) = (self.scanned.get(&tid), scanned.get(&tid)) else {
                continue;
            };
            let top = self.top;
            let entry = self
                .vms
                .entry(vm.clone())
                .or_insert_with(|| VmWaitBy::new(top));
            for (key, ns) in to_schedstat(by, w1.saturating_sub(w0)) {
                // stealscope's own threads are its cost, not a culprit
                // series: counted in `other`, so the sums still hold.
                match key.kind {
                    Kind::Own => entry.culprits.add_other(ns),
                    _ => entry.culprits.add(key.label(), ns),
                }
            }
            if let (Some(a), Some(b)) = (before.threads.get(&tid), now.threads.get(&tid)) {
                entry.episodes.add(&b.episodes.since(&a.episodes));
            }
        }
        self.scanned = scanned;
    }
}

/// Each vCPU thread's schedstat wait, ns.
fn vcpu_waits(threads: &[ThreadSample]) -> HashMap<u32, u64> {
    threads
        .iter()
        .filter(|t| matches!(t.role, ThreadRole::Vcpu(_)))
        .map(|t| (t.tid, t.sched.wait_ns))
        .collect()
}

/// Each VM's vCPU wait between two readings by culprit, for one host
/// scan of a recording: (VM label, [(culprit label, ns)]) with its `top`
/// largest culprits, most first, then `other` when the rest waited.
pub fn scan_culprits<V: ScannedVmId>(
    before: &SchedSample,
    now: &SchedSample,
    vms: &[V],
    threads: &[ThreadSample],
    top: usize,
) -> Vec<(String, Vec<(Culprit, u64)>)> {
    let labels = vm_labels(vms);
    let mut per_vm: BTreeMap<String, BTreeMap<Culprit, u64>> = BTreeMap::new();
    for (vm, _, by) in labelled_wait_by(before, now, vms, threads, &labels) {
        let e = per_vm.entry(vm.clone()).or_default();
        for (c, ns) in by {
            *e.entry(c.label()).or_default() += ns;
        }
    }
    per_vm
        .into_iter()
        .map(|(vm, by)| {
            let mut rows: Vec<(Culprit, u64)> = by.into_iter().collect();
            rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.name.cmp(&b.0.name)));
            // stealscope's own threads count in `other`, never as a culprit.
            let is_own = |r: &(Culprit, u64)| r.0.kind == Kind::Own;
            let own: u64 = rows.iter().filter(|r| is_own(r)).map(|r| r.1).sum();
            rows.retain(|r| !is_own(r));
            let rest: u64 = own + rows.iter().skip(top).map(|r| r.1).sum::<u64>();
            rows.truncate(top);
            if rest > 0 {
                rows.push((Culprit::other(), rest));
            }
            (vm, rows)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(name: &str) -> Culprit {
        Culprit::new(Kind::HostProcess, name)
    }

    #[test]
    fn series_stay_bounded_and_never_decrease() {
        let mut v = VmWaitBy::new(3);
        let mut last: BTreeMap<Culprit, f64> = BTreeMap::new();
        // A rotating cast of 12 culprits with growing, uneven waits.
        for round in 0..200u64 {
            let who = format!("p{}", (round * 7) % 12);
            v.culprits.add(l(&who), 1_000 + (round % 5) * 3_000_000);
            let s = v.series();
            assert!(s.len() <= 4, "{s:?}");
            for (c, secs) in s {
                let prev = last.insert(c.clone(), secs).unwrap_or(0.0);
                assert!(secs >= prev, "{} went from {prev} to {secs}", c.name);
            }
            let sum: f64 = v.series().iter().map(|x| x.1).sum();
            assert!((sum - v.total_s()).abs() < 1e-9);
        }
    }

    #[test]
    fn a_big_late_culprit_displaces_the_smallest() {
        let mut v = VmWaitBy::new(2);
        v.culprits.add(l("a"), 10);
        v.culprits.add(l("b"), 20);
        v.culprits.add(l("burn"), 5);
        assert!(
            v.series().iter().any(|x| x.0.name == "a"),
            "5 < 10: not yet"
        );
        v.culprits.add(l("burn"), 1_000);
        let names: Vec<String> = v.series().into_iter().map(|x| x.0.name).collect();
        assert_eq!(names, ["b", "burn", "other"]);
        assert_eq!(v.series()[2].1, 10e-9, "a's 10 ns went to other");
    }

    #[test]
    fn episode_buckets_split_at_the_bounds() {
        let mut h = EpisodeHist::default();
        for ns in [5_000, 200_000, 3_000_000, 3_000_000, 2_000_000_000] {
            h.record(ns);
        }
        let b = episode_buckets(&h);
        let at = |s: f64| b.iter().find(|x| x.0 == s).unwrap().1;
        assert_eq!(at(10e-6), 1);
        assert_eq!(at(500e-6), 1);
        assert_eq!(at(5e-3), 2);
        assert_eq!(at(1.0), 0);
        assert_eq!(b.last().unwrap(), &(f64::INFINITY, 1));
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), h.count);
    }

    fn key(name: &str) -> Culprit {
        Culprit::new(Kind::HostProcess, name)
    }

    #[test]
    fn a_span_is_the_kernels_wait_named_in_the_collectors_proportions() {
        let by: BTreeMap<Culprit, u64> = [(key("a"), 300), (key("b"), 100)].into();
        assert_eq!(
            to_schedstat(by, 800),
            [(key("a"), 600), (key("b"), 200)],
            "scaled"
        );
        let thirds: BTreeMap<Culprit, u64> = [(key("a"), 1), (key("b"), 1), (key("c"), 1)].into();
        let parts = to_schedstat(thirds, 10);
        assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), 10, "{parts:?}");
        assert_eq!(to_schedstat(BTreeMap::new(), 5), [(Culprit::untraced(), 5)]);
        assert!(to_schedstat(BTreeMap::new(), 0).is_empty());
    }

    /// The collector's readings span other instants than the scans' reads
    /// (a reading of 10,000 threads takes a large part of a second): each
    /// span charges the schedstat wait, so the series add up to it at every
    /// scrape; stealscope's own share goes to `other`.
    #[test]
    fn series_add_up_to_the_vcpus_schedstat_wait_at_every_scan() {
        use stealscope_readers::process::TaskSchedstat;
        use stealscope_who::{Route, SchedStats, Thread, ThreadWaits};
        let vms = [(10u32, "a".to_string())];
        let scan = |wait_ns: u64| {
            [ThreadSample {
                pid: 10,
                tid: 11,
                role: ThreadRole::Vcpu(0),
                sched: TaskSchedstat {
                    run_ns: 0,
                    wait_ns,
                    slices: 1,
                },
            }]
        };
        let c = |tgid: u32, comm: &str| Thread {
            tid: tgid,
            tgid,
            comm: comm.into(),
            kthread: false,
        };
        let reading = |hog: u64, own: u64| SchedSample {
            route: Route::Bpf,
            monotonic_ns: 0,
            threads: [(
                11,
                ThreadWaits {
                    tid: 11,
                    by_thread: [(c(99, "hog"), hog), (c(std::process::id(), "x"), own)].into(),
                    ..Default::default()
                },
            )]
            .into(),
            stats: SchedStats::default(),
            procs: Default::default(),
        };
        let mut w = RunningWaitBy::default();
        w.baseline(&scan(1_000));
        // The kernel counted 900 ns over the scans, the collector 750 + 250.
        w.push(&reading(0, 0), &reading(750, 250), &vms, &scan(1_900));
        let total = |w: &RunningWaitBy| w.vms["a"].series().iter().map(|x| x.1).sum::<f64>();
        assert!(
            (total(&w) - 900e-9).abs() < 1e-15,
            "{:?}",
            w.vms["a"].series()
        );
        let series = w.vms["a"].series();
        assert_eq!(series[0].0.name, "hog");
        assert!((series[0].1 - 675e-9).abs() < 1e-15);
        assert!((series[1].1 - 225e-9).abs() < 1e-15, "own in other");
        w.push(&reading(750, 250), &reading(1_750, 250), &vms, &scan(2_500));
        assert!((total(&w) - 1_500e-9).abs() < 1e-15);
    }
}
