//! The host's threads as `place` watches them: every thread's run and
//! run-queue wait (/proc/PID/task/TID/schedstat) and state (stat) sampled
//! every [`STEP`], kept for the last [`KEEP_S`] seconds as each thread's
//! demand (run plus wait, a share of a CPU per step). The simulator replays
//! that demand to predict a plan (`predict`), the measured steal of an
//! interval is compared with what was predicted (`window`), and the
//! watchdog reads the same samples (`place_watch`). stealscope's own
//! threads are left out: its cost is not the host's work.

use crate::place_threads::{Reading, ThreadNow, Threads};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use stealscope_placement::input::CpuController;
use stealscope_placement::{HostInput, Plan};
use stealscope_readers::{autogroup, RootFs};
use stealscope_sim::choose;
use stealscope_sim::predict::{
    self, DemandHistory, HostThread, Measures, PredictInput, Prediction, ThreadFigures,
};

/// Time between samples.
pub const STEP: Duration = Duration::from_millis(500);
/// Demand kept, seconds.
pub const KEEP_S: f64 = 300.0;

/// What a thread did between two readings of it.
fn figures(a: &ThreadNow, b: &ThreadNow) -> ThreadFigures {
    let secs = b.at.saturating_duration_since(a.at).as_secs_f64();
    let s = |x: u64, y: u64| y.saturating_sub(x) as f64 / 1e9 / secs.max(1e-9);
    let (run, wait) = (s(a.run_ns, b.run_ns), s(a.wait_ns, b.wait_ns));
    ThreadFigures {
        steal_pct: (100.0 * wait).clamp(0.0, 100.0),
        demand: (run + wait).clamp(0.0, 1.0),
        work_cpus: run.clamp(0.0, 1.0),
    }
}

/// The samples of the last minutes, and the reading an interval started at.
#[derive(Debug, Default)]
pub struct Recorder {
    last: Option<(Instant, Reading)>,
    /// Where the current window started (`begin_window`).
    window: Option<(Instant, Reading)>,
    pub history: DemandHistory,
    samples: usize,
    /// Every thread's files, kept open from sample to sample.
    threads: Threads,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            history: DemandHistory {
                step_s: STEP.as_secs_f64(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Takes a reading and adds each thread's demand since the last one.
    pub fn sample(&mut self) -> &Reading {
        let now = Instant::now();
        let r = self.threads.read();
        if let Some((_, prev)) = &self.last {
            let keep = (KEEP_S / self.history.step_s).ceil() as usize;
            let n = self.samples;
            for (tid, b) in &r {
                let Some(a) = prev.get(tid) else { continue };
                let d = figures(a, b).demand;
                let v = self.history.by_tid.entry(*tid).or_default();
                // A thread first seen now: as if it had this demand all
                // along. The replay is a forecast of the next minutes, and
                // the threads running now are the best guess of those (the
                // ones that exited are dropped below). Measured: padding
                // with zeros put a fixture host's prediction 8-15 pp under
                // what was then measured, amid other helpers' builds.
                while v.len() < n {
                    v.push(d);
                }
                v.push(d);
                if v.len() > keep {
                    v.drain(..v.len() - keep);
                }
            }
            self.history.by_tid.retain(|tid, _| r.contains_key(tid));
            self.samples = (n + 1).min(keep);
        }
        self.last = Some((now, r));
        &self.last.as_ref().expect("just set").1
    }

    pub fn last(&self) -> Option<&Reading> {
        self.last.as_ref().map(|(_, r)| r)
    }

    /// Stops sampling for a while: the next sample starts afresh instead of
    /// spanning the gap as one step, and the samples kept go: after a quiet
    /// stretch they may be an hour old, and a prediction made from them
    /// would replay that hour (the next close pass starts as the first).
    pub fn pause(&mut self) {
        self.last = None;
        self.window = None;
        self.history.by_tid.clear();
        self.samples = 0;
    }

    /// Starts a measured window at the last reading (taking one if none).
    pub fn begin_window(&mut self) {
        if self.last.is_none() {
            self.sample();
        }
        self.window = self.last.clone();
    }

    /// The readings at the window's start and now.
    pub fn window_ends(&self) -> Option<(&Reading, &Reading)> {
        Some((&self.window.as_ref()?.1, &self.last.as_ref()?.1))
    }

    /// Each thread's figures from the window's start to the last reading.
    pub fn window(&self) -> BTreeMap<u32, ThreadFigures> {
        let (Some((_, a)), Some((_, b))) = (&self.window, &self.last) else {
            return BTreeMap::new();
        };
        b.iter()
            .filter_map(|(tid, y)| Some((*tid, figures(a.get(tid)?, y))))
            .collect()
    }
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("pid {pid}"))
}

/// A thread's nice (field 19 of its stat line).
fn nice(pid: u32, tid: u32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s[s.rfind(')')? + 1..].to_string();
            rest.split_whitespace().nth(16)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The group `pid` is scheduled in, with the group's weight in cpu.shares
/// units: its cpu cgroup when that is not the root, else its autogroup
/// (/proc/PID/autogroup, weighted by the autogroup's nice) when it has
/// one; None: the top level.
pub fn sched_group(pid: u32, ctl: Option<&CpuController>) -> Option<(String, f64)> {
    if let Some(c) = ctl {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let cgs = stealscope_readers::process::parse_cgroup(&text, "cgroup").ok()?;
        if let Some(m) = c.membership(&cgs).filter(|m| m.path != "/") {
            let g = c.group(&m.path);
            let (default, _, _) = g.weight_unit();
            let w = std::fs::read_to_string(g.weight_file())
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
                .map_or(1024.0, |w| w * 1024.0 / default as f64);
            return Some((g.dir, w));
        }
    }
    let ag = autogroup::read(&RootFs::live(), pid).ok()??;
    Some((
        autogroup::group_name(ag.id),
        autogroup::nice_weight(ag.nice),
    ))
}

fn allowed(pid: u32, tid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            let l = s
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            stealscope_readers::cpulist::parse(l.trim(), "status").ok()
        })
        .unwrap_or_default()
}

/// The host's own threads that want CPU (not a VM's, not ours), named by
/// process, with their allowed CPUs.
pub fn host_work(host: &HostInput, rec: &Recorder) -> Vec<HostThread> {
    let vm_pids: Vec<u32> = host.vms.iter().map(|v| v.pid).collect();
    let Some(last) = rec.last() else {
        return Vec::new();
    };
    let ctl = host.cpu_controller.as_ref();
    last.iter()
        .filter(|(tid, t)| {
            !vm_pids.contains(&t.pid)
                && rec.history.mean(**tid).unwrap_or(0.0) >= predict::HOST_WORK_MIN
        })
        .map(|(tid, t)| HostThread {
            name: comm(t.pid),
            pid: t.pid,
            tid: *tid,
            cpus: allowed(t.pid, *tid),
            group: sched_group(t.pid, ctl),
            weight: predict::nice_weight(nice(t.pid, *tid)),
        })
        .collect()
}

/// The autogroup of each VM the kernel schedules in one, as the planner
/// read it.
fn vm_autogroups(host: &HostInput) -> BTreeMap<u32, (String, f64)> {
    host.vms
        .iter()
        .filter_map(|v| {
            let ag = v.autogroup.as_ref()?;
            Some((v.pid, (ag.name(), autogroup::nice_weight(ag.nice))))
        })
        .collect()
}

/// A plan made now as offered: the largest part of it the simulator does
/// not predict worse (`stealscope_sim::choose`), or, when `whole` (--force,
/// or `never_worse` off), the plan itself; with its prediction, None when
/// the host has no VM to predict for.
pub fn chosen(
    host: &HostInput,
    rec: &Recorder,
    plan: Plan,
    whole: bool,
) -> (Plan, Option<Prediction>) {
    if host.vms.is_empty() {
        return (plan, None);
    }
    if whole {
        let pred = predict(host, rec, &plan);
        return (plan, Some(pred));
    }
    let (plan, pred) = choose::never_worse(plan, |p| predict(host, rec, p));
    (plan, Some(pred))
}

/// What the simulator predicts `plan` does to `host`, from the demand
/// `rec` holds.
pub fn predict(host: &HostInput, rec: &Recorder, plan: &Plan) -> Prediction {
    let work = host_work(host, rec);
    predict::predict(
        &PredictInput {
            host,
            demand: &rec.history,
            host_work: &work,
            autogroups: &vm_autogroups(host),
        },
        plan,
    )
}

/// The measures of the window `rec` last measured for the VMs `vms`
/// (pids; a prediction's `vms`), by the same rules as the prediction's.
pub fn measured(host: &HostInput, rec: &Recorder, vms: &[u32]) -> Measures {
    let w = rec.window();
    let vms: Vec<Vec<ThreadFigures>> = host
        .vms
        .iter()
        .filter(|vm| vms.contains(&vm.pid))
        .map(|vm| {
            vm.vcpus
                .iter()
                .filter_map(|(_, t)| w.get(&t.tid).copied())
                .collect()
        })
        .filter(|v: &Vec<ThreadFigures>| !v.is_empty())
        .collect();
    let hw: Vec<ThreadFigures> = host_work(host, rec)
        .iter()
        .filter_map(|h| w.get(&h.tid).copied())
        .collect();
    predict::measures(&vms, &hw)
}

/// The host processes that wanted the most CPU in the window `rec` last
/// measured, `name (pid N) 0.45` in CPUs runnable, largest first: the
/// daemon names them beside a measured result, so host work the
/// prediction did not expect says whose it is.
pub fn host_work_named(host: &HostInput, rec: &Recorder, most: usize) -> Vec<String> {
    let w = rec.window();
    let mut by_pid: BTreeMap<u32, (String, f64)> = BTreeMap::new();
    for h in host_work(host, rec) {
        if let Some(f) = w.get(&h.tid) {
            let e = by_pid.entry(h.pid).or_insert_with(|| (h.name.clone(), 0.0));
            e.1 += f.demand;
        }
    }
    let mut v: Vec<(u32, String, f64)> = by_pid.into_iter().map(|(p, (n, d))| (p, n, d)).collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    v.into_iter()
        .filter(|(_, _, d)| *d >= 0.01)
        .take(most)
        .map(|(pid, name, d)| format!("{name} (pid {pid}) {d:.2}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_is_recorded_near_one_cpu() {
        // A busy child process, measured by its own schedstat.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut rec = Recorder::new();
        rec.sample();
        rec.begin_window();
        for _ in 0..3 {
            std::thread::sleep(STEP);
            rec.sample();
        }
        let w = rec.window();
        let _ = child.kill();
        let _ = child.wait();
        let f = w.get(&pid).expect("the child was read");
        // Runnable all the time: run plus wait is the whole window.
        assert!(f.demand > 0.9, "{f:?}");
        assert_eq!(rec.history.by_tid[&pid].len(), 3);
    }
}
