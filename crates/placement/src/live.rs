//! The planner's input from a host observed twice (demand is each thread's
//! run time plus run-queue wait between the two), plus the topology, swap,
//! cgroup mounts and whether numad runs. Reads through a `Source`, so tests
//! run on fixtures.

use crate::action::Knob;
use crate::input::{
    CpuController, CulpritEvidence, HostInput, HostWork, NodeInput, ThreadInput, Topology,
    VmAutogroup, VmInput, WaitEvidence,
};
use std::collections::BTreeMap;
use stealscope_model::host::attribution::{attribute, Attribution};
use stealscope_model::host::discovery::weight_group_path;
use stealscope_model::host::observation::ThreadObs;
use stealscope_model::host::observation::VmObs;
use stealscope_model::host::HostObservation;
use stealscope_readers::cgroupfs::{CgroupMounts, CpuWeight};
use stealscope_readers::{autogroup, cpu_topology, kernel, process, ReadError, Source};
use stealscope_who::{Culprit, Kind};

/// Where the cpu controller is mounted (v1 preferred: where it is mounted,
/// v2 cannot have it).
pub fn cpu_controller(src: &dyn Source) -> Result<Option<CpuController>, ReadError> {
    controller_in(src, &stealscope_readers::cgroupfs::mounts(src)?)
}

fn controller_in(src: &dyn Source, m: &CgroupMounts) -> Result<Option<CpuController>, ReadError> {
    if let Some(mount) = m.v1_controller("cpu") {
        return Ok(Some(CpuController {
            v2: false,
            mount: mount.to_string(),
        }));
    }
    let Some(v2) = &m.v2 else { return Ok(None) };
    let ctl = src.read_value(&format!("{}/cgroup.controllers", v2.trim_end_matches('/')))?;
    Ok(ctl
        .filter(|c| c.split_whitespace().any(|x| x == "cpu"))
        .map(|_| CpuController {
            v2: true,
            mount: v2.clone(),
        }))
}

/// Demand: run time plus run-queue wait over the interval, as a share of
/// one CPU. Run time alone is capped by the contention being planned for
/// (4 busy threads on 2 CPUs each "use" 0.5); a thread can want at most 1.
fn thread(t1: &ThreadObs, t0: Option<&ThreadObs>, wall_s: f64) -> ThreadInput {
    let util = match (t0.and_then(|t| t.sched), t1.sched) {
        // A counter that went backwards (a reused tid) is no measurement.
        (Some(a), Some(b)) if b.run_ns >= a.run_ns && b.wait_ns >= a.wait_ns && wall_s > 0.0 => {
            let ns = (b.run_ns - a.run_ns) + (b.wait_ns - a.wait_ns);
            Some((ns as f64 / 1e9 / wall_s).min(1.0))
        }
        _ => None,
    };
    ThreadInput {
        tid: t1.tid,
        util,
        cpus_allowed: t1.cpus_allowed.clone().unwrap_or_default(),
    }
}

/// What one pass over /proc tells the planner: whether numad runs, and
/// (when autogroups are on) the processes of each autogroup.
struct ProcScan {
    numad: bool,
    autogroups: BTreeMap<u64, Vec<u32>>,
}

fn proc_scan(src: &dyn Source, autogroups_on: bool) -> Result<ProcScan, ReadError> {
    let mut out = ProcScan {
        numad: false,
        autogroups: BTreeMap::new(),
    };
    for pid in process::pids(src)? {
        out.numad |= process::comm(src, pid)?.as_deref() == Some("numad");
        if autogroups_on {
            if let Some(ag) = autogroup::read(src, pid)? {
                out.autogroups.entry(ag.id).or_default().push(pid);
            }
        }
    }
    Ok(out)
}

/// The VM's autogroup when the kernel schedules it there: autogroups on
/// and the VM in the root cpu group (kernel task_wants_autogroup).
fn vm_autogroup(v: &VmObs, in_root: bool, scan: &ProcScan) -> Option<VmAutogroup> {
    let ag = v.autogroup.filter(|_| in_root)?;
    let members = scan.autogroups.get(&ag.id)?;
    Some(VmAutogroup {
        id: ag.id,
        nice: ag.nice,
        shared_with: members.iter().copied().filter(|p| *p != v.pid).collect(),
    })
}

/// `t0` and `t1` are the same host `wall_s` apart (t1 read at the end, with
/// memory per node). VMs that appeared in between have no utilisation yet.
pub fn host_input(
    src: &dyn Source,
    t0: &HostObservation,
    t1: &HostObservation,
    wall_s: f64,
) -> Result<HostInput, ReadError> {
    let sets = cpu_topology::read(src)?;
    let cpus = sets.online.clone().unwrap_or_default();
    let cores = cpu_topology::cores(src, &cpus)?;
    let mem = kernel::meminfo(src)?;
    let ctl = controller_in(src, &t1.cgroup_mounts)?;
    let nodes = t1
        .nodes
        .iter()
        .map(|n| NodeInput {
            id: n.id,
            cpus: n
                .cpus
                .iter()
                .copied()
                .filter(|c| cpus.contains(c))
                .collect(),
            mem_total_bytes: n.mem_total_kb.map(|k| k << 10),
            mem_free_bytes: n.mem_free_kb.map(|k| k << 10),
        })
        .collect();
    let before: BTreeMap<(u32, u32), &ThreadObs> = t0
        .vms
        .iter()
        .flat_map(|v| {
            v.vcpus
                .iter()
                .map(|(_, t)| t)
                .chain(&v.others)
                .map(move |t| ((v.pid, t.tid), t))
        })
        .collect();
    let att = attribute(t0, t1);
    let scan = proc_scan(src, t1.autogroups_on())?;
    let vms = t1
        .vms
        .iter()
        .map(|v| {
            let th = |t: &ThreadObs| thread(t, before.get(&(v.pid, t.tid)).copied(), wall_s);
            // The group whose weight the VM's weight is (libvirt's scope,
            // where `virsh schedinfo` writes, not its emulator group).
            let cpu_group = ctl.as_ref().and_then(|c| {
                c.membership(&v.cgroups)
                    .map(|m| c.group(&weight_group_path(&m.path)))
            });
            let in_root = ctl.as_ref().is_none_or(|c| {
                cpu_group
                    .as_ref()
                    .is_none_or(|g| g.dir.trim_end_matches('/') == c.mount.trim_end_matches('/'))
            });
            VmInput {
                pid: v.pid,
                name: v.name.clone(),
                knob: match v.manager.as_deref() {
                    Some("libvirt") => Knob::Libvirt {
                        domain: v.name.clone(),
                    },
                    _ => Knob::Direct,
                },
                vcpus: v.vcpus.iter().map(|(i, t)| (*i, th(t))).collect(),
                others: v.others.iter().map(th).collect(),
                mem_by_node: v.numa_bytes.clone(),
                mem_policy: v.mem_policy.clone(),
                cpu_weight: v.cpu_weight.as_ref().map(|(_, w)| match *w {
                    CpuWeight::Shares(x) | CpuWeight::Weight(x) => x,
                }),
                autogroup: vm_autogroup(v, in_root, &scan),
                cpu_group,
                wait: evidence(&att, v, wall_s),
            }
        })
        .collect();
    let host_work = host_work(src, t0, t1, wall_s, &cpus)?;
    Ok(HostInput {
        topology: Topology { cpus, cores, nodes },
        swap_total_bytes: mem.as_ref().and_then(|m| m.swap_total_bytes),
        swap_free_bytes: mem.as_ref().and_then(|m| m.swap_free_bytes),
        numa_balancing: t1.numa_balancing,
        numad_running: scan.numad,
        cpu_controller: ctl,
        vms,
        shared_group_weight: None,
        host_work,
    })
}

/// Every other thread's demand (run plus wait between the sides, at most
/// one CPU) where it may run (Cpus_allowed at the end), leaving out this
/// process (stealscope measuring is not the host's work) and threads that
/// ran under 1 % of a CPU (their masks are not worth reading).
fn host_work(
    src: &dyn Source,
    t0: &HostObservation,
    t1: &HostObservation,
    wall_s: f64,
    online: &[u32],
) -> Result<HostWork, ReadError> {
    let mut w = HostWork::default();
    // No reading at the start: every thread would count its whole life.
    if wall_s <= 0.0 || t0.procs.is_empty() {
        return Ok(w);
    }
    let me = std::process::id();
    for p in t1.procs.iter().filter(|p| p.pid != me) {
        let before = t0.procs.iter().find(|q| q.pid == p.pid);
        for (tid, s1) in &p.threads {
            // A thread born in the interval counts from zero.
            let s0 = before
                .and_then(|b| b.threads.get(tid).copied())
                .unwrap_or_default();
            let ns = s1.run_ns.saturating_sub(s0.run_ns) + s1.wait_ns.saturating_sub(s0.wait_ns);
            let demand = (ns as f64 / 1e9 / wall_s).min(1.0);
            if demand < HOST_WORK_MIN {
                continue;
            }
            // A thread gone since is no load any more.
            let Some(st) = process::task_status(src, p.pid, *tid)? else {
                continue;
            };
            w.add(demand, &st.cpus_allowed.unwrap_or_default(), online);
        }
    }
    Ok(w)
}

/// Threads under this demand (CPUs) are not counted as host work.
const HOST_WORK_MIN: f64 = 0.01;

/// A VM's vCPU wait by culprit from the interval's attribution; None when
/// attribution did not run (no collector, not root) or saw none of its
/// vCPUs.
fn evidence(att: &Attribution, v: &VmObs, wall_s: f64) -> Option<WaitEvidence> {
    if !att.status.available() || wall_s <= 0.0 {
        return None;
    }
    let mut by: BTreeMap<(Kind, &str, Option<u32>), f64> = BTreeMap::new();
    let mut seen = 0;
    for (_, t) in &v.vcpus {
        let Some((rows, _)) = att.by_tid.get(&t.tid) else {
            continue;
        };
        seen += 1;
        // stealscope's own threads are its cost, not a culprit to plan around.
        for r in rows.iter().filter(|r| r.culprit.kind != Kind::Own) {
            let c: &Culprit = &r.culprit;
            *by.entry((c.kind, c.name.as_str(), c.pid)).or_default() += r.seconds;
        }
    }
    if seen == 0 {
        return None;
    }
    let total: f64 = by.values().sum();
    let mut culprits: Vec<CulpritEvidence> = by
        .into_iter()
        .map(|((kind, name, pid), s)| CulpritEvidence {
            kind,
            name: name.to_string(),
            pid,
            share: if total > 0.0 { s / total } else { 0.0 },
        })
        .collect();
    culprits.sort_by(|a, b| b.share.total_cmp(&a.share));
    culprits.truncate(3);
    Some(WaitEvidence {
        wait_share: total / wall_s / seen as f64,
        culprits,
    })
}

/// The weight of a cpu group now; None when it does not exist (or its
/// weight file is unreadable).
pub fn group_weight(src: &dyn Source, g: &crate::action::CgroupRef) -> Option<u64> {
    src.read_value(&g.weight_file())
        .ok()
        .flatten()
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_model::host::discovery::ThreadRole;
    use stealscope_readers::process::TaskSchedstat;

    fn obs(run_ms: u64, wait_ms: u64) -> ThreadObs {
        ThreadObs {
            tid: 7,
            comm: "CPU 0/KVM".into(),
            role: ThreadRole::Vcpu(0),
            sched: Some(TaskSchedstat {
                run_ns: run_ms * 1_000_000,
                wait_ns: wait_ms * 1_000_000,
                slices: 1,
            }),
            cpus_allowed: Some(vec![0, 1]),
        }
    }

    /// A host process `backup` with one thread pinned to CPU 0 (busy: ran
    /// half the second, waited the other half) and one allowed anywhere
    /// (0.2 CPU), a kernel thread under 1 % of a CPU, and stealscope itself.
    #[test]
    fn host_work_counts_other_threads_where_they_may_run() {
        use stealscope_model::host::observation::HostProc;
        use stealscope_readers::MemFs;
        let st = |run_ms: u64, wait_ms: u64| TaskSchedstat {
            run_ns: run_ms * 1_000_000,
            wait_ns: wait_ms * 1_000_000,
            slices: 1,
        };
        let proc_ = |pid: u32, t: Vec<(u32, TaskSchedstat)>| HostProc {
            pid,
            comm: "x".into(),
            kthread: None,
            threads: t.into_iter().collect(),
        };
        let me = std::process::id();
        let mut t0 = HostObservation::default();
        let mut t1 = HostObservation::default();
        t0.procs = vec![
            proc_(50, vec![(50, st(0, 0)), (51, st(0, 0))]),
            proc_(7, vec![(7, st(0, 0))]),
            proc_(me, vec![(me, st(0, 0))]),
        ];
        t1.procs = vec![
            proc_(50, vec![(50, st(500, 500)), (51, st(150, 50))]),
            proc_(7, vec![(7, st(5, 0))]),
            proc_(me, vec![(me, st(900, 0))]),
        ];
        let status = |cpus: &str| format!("Name:\tx\nCpus_allowed_list:\t{cpus}\n");
        let src = MemFs::new("fixture")
            .with("/proc/50/task/50/status", status("0"))
            .with("/proc/50/task/51/status", status("0-1"))
            .with("/proc/7/task/7/status", status("1"))
            .with(&format!("/proc/{me}/task/{me}/status"), status("1"));
        let w = host_work(&src, &t0, &t1, 1.0, &[0, 1]).unwrap();
        assert_eq!(w.by_cpu.len(), 1, "{w:?}");
        assert!((w.on(0) - 1.0).abs() < 1e-9, "{w:?}");
        assert!((w.anywhere - 0.2).abs() < 1e-9, "{w:?}");
        assert_eq!(
            w.on(1),
            0.0,
            "the kernel thread and stealscope are left out: {w:?}"
        );
    }

    #[test]
    fn demand_is_run_plus_wait_capped_at_one_cpu() {
        // Busy, sharing a CPU with another busy thread: ran half, waited half.
        let d = thread(&obs(1500, 1500), Some(&obs(1000, 1000)), 1.0).util;
        assert!((d.unwrap() - 1.0).abs() < 1e-9, "{d:?}");
        // Mostly idle: ran 100 ms, waited 20 ms of a second.
        let d = thread(&obs(1100, 1020), Some(&obs(1000, 1000)), 1.0).util;
        assert!((d.unwrap() - 0.12).abs() < 1e-9, "{d:?}");
        // Counted over a slightly shorter wall time than the counters: capped.
        let d = thread(&obs(2000, 2000), Some(&obs(1000, 1000)), 1.9).util;
        assert_eq!(d, Some(1.0));
        // A reused tid (counters went back) or no first reading: no measurement.
        assert_eq!(thread(&obs(10, 10), Some(&obs(1000, 1000)), 1.0).util, None);
        assert_eq!(thread(&obs(10, 10), None, 1.0).util, None);
    }
}
