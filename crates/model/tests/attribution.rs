//! Attribution derived from hand-built collector readings: every nanosecond
//! lands on the right culprit kind and name, shares add up, the per-host
//! culprits name their victims, and a missing or refused collector says why.

use stealscope_model::host::attribution::attribute;
use stealscope_model::host::discovery::{ThreadRole, VmKind};
use stealscope_model::host::observation::{HostObservation, ThreadObs, VcpuSource, VmObs};
use stealscope_model::host::sched_store::StoredSched;
use stealscope_who::{Kind, Route, SchedSample, SchedStats, Thread, ThreadWaits};

fn thread(tid: u32, role: ThreadRole) -> ThreadObs {
    ThreadObs {
        tid,
        comm: format!("t{tid}"),
        role,
        sched: None,
        cpus_allowed: None,
    }
}

fn vm(name: &str, pid: u32, vcpus: &[u32], others: &[u32]) -> VmObs {
    VmObs {
        pid,
        name: name.into(),
        kind: VmKind::QemuTcg,
        cmdline: vec![],
        vcpu_source: VcpuSource::ThreadName,
        qmp_socket: None,
        manager: None,
        vcpus: vcpus
            .iter()
            .enumerate()
            .map(|(i, &t)| (i as u32, thread(t, ThreadRole::Vcpu(i as u32))))
            .collect(),
        others: others
            .iter()
            .map(|&t| thread(t, ThreadRole::Emulator))
            .collect(),
        cgroups: vec![],
        cpu_weight: None,
        status: None,
        numa_bytes: None,
        mem_policy: None,
        autogroup: None,
    }
}

fn c(tid: u32, tgid: u32, comm: &str, kthread: bool) -> Thread {
    Thread {
        tid,
        tgid,
        comm: comm.into(),
        kthread,
    }
}

fn waits(tid: u32, by: &[(Thread, u64)], idle: u64, episodes: &[u64]) -> ThreadWaits {
    let mut w = ThreadWaits {
        tid,
        idle_ns: idle,
        irq_ns: 1_000,
        ..Default::default()
    };
    for (c, ns) in by {
        w.by_thread.insert(c.clone(), *ns);
    }
    for &e in episodes {
        w.episodes.record(e);
    }
    w
}

fn side(vms: Vec<VmObs>, threads: Vec<ThreadWaits>, events: u64) -> HostObservation {
    let s = SchedSample {
        route: Route::Bpf,
        monotonic_ns: events,
        threads: threads.into_iter().map(|t| (t.tid, t)).collect(),
        stats: SchedStats {
            events,
            lost_events: 0,
            overflows: 0,
            missed_switches: 0,
            unwatched: 0,
        },
        procs: Default::default(),
    };
    HostObservation {
        vms,
        sched: Some(StoredSched::from(&s)),
        ..Default::default()
    }
}

#[test]
fn wait_is_split_by_culprit_and_summed_per_host() {
    let vms = || {
        vec![
            vm("vmA", 100, &[101, 102], &[103]),
            vm("vmB", 200, &[201], &[]),
        ]
    };
    let bash = c(300, 300, "bash", false);
    let kw = c(7, 7, "kworker/0:1", false);
    let kw = Thread {
        kthread: true,
        ..kw
    };
    // t0: some wait already charged before the interval.
    let t0 = side(
        vms(),
        vec![waits(101, &[(bash.clone(), 5_000_000)], 0, &[5_000_000])],
        10,
    );
    let t1 = side(
        vms(),
        vec![
            waits(
                101,
                &[
                    (bash.clone(), 605_000_000),
                    (c(201, 200, "CPU 0/TCG", false), 200_000_000),
                    (kw.clone(), 50_000_000),
                    (c(103, 100, "qemu-system-x86", false), 40_000_000),
                ],
                9_000,
                &[5_000_000, 2_000_000, 20_000_000, 500_000],
            ),
            waits(
                102,
                &[(c(101, 100, "CPU 0/TCG", false), 100_000_000)],
                0,
                &[],
            ),
        ],
        110,
    );
    let a = attribute(&t0, &t1);
    assert_eq!(a.status.route, "bpf");
    assert_eq!(a.status.events, Some(100));
    let (by, ep) = &a.by_tid[&101];
    let names: Vec<(Kind, &str)> = by
        .iter()
        .map(|w| (w.culprit.kind, w.culprit.name.as_str()))
        .collect();
    assert_eq!(
        names[..4],
        [
            (Kind::HostProcess, "bash"),
            (Kind::Vcpu, "vmB"),
            (Kind::HostKthread, "kworker"),
            (Kind::Vmm, "vmA")
        ]
    );
    assert_eq!(by[0].culprit.pid, Some(300));
    assert!((by[0].seconds - 0.6).abs() < 1e-9, "{}", by[0].seconds);
    let sum: f64 = by.iter().map(|w| w.seconds).sum();
    // irq time is the same at both ends: no irq row.
    assert!((sum - (0.89 + 9e-6)).abs() < 1e-9, "{sum}");
    assert!(!by.iter().any(|w| w.culprit.kind == Kind::Irq));
    assert!((by.iter().map(|w| w.share).sum::<f64>() - 1.0).abs() < 1e-9);
    assert!(by
        .iter()
        .any(|w| w.culprit.kind == Kind::Unknown && w.culprit.name == "idle"));
    // Episodes of the interval only: the one at t0 is subtracted.
    assert_eq!(ep.count, 3);
    assert_eq!(ep.over_1ms, 2);
    assert_eq!(ep.over_10ms, 1);
    assert_eq!(ep.max_us, Some(20_000.0));
    let top = &a.culprits[0];
    assert_eq!(
        (top.charge.culprit.kind, top.charge.culprit.name.as_str()),
        (Kind::HostProcess, "bash")
    );
    assert_eq!(top.victims, vec!["vmA".to_string()]);
    let vcpu_a = a
        .culprits
        .iter()
        .find(|c| c.charge.culprit.kind == Kind::Vcpu && c.charge.culprit.name == "vmA")
        .unwrap();
    assert_eq!(vcpu_a.victims, vec!["vmA".to_string()]);
    let total: f64 = a.culprits.iter().map(|c| c.charge.share).sum();
    assert!((total - 1.0).abs() < 1e-9);
}

#[test]
fn without_a_reading_the_reason_is_given() {
    let mut t0 = HostObservation {
        vms: vec![vm("vmA", 100, &[101], &[])],
        ..Default::default()
    };
    let t1 = t0.clone();
    let a = attribute(&t0, &t1);
    assert_eq!(a.status.route, "none");
    assert!(
        a.status.reason.contains("no scheduler-event reading at t0"),
        "{}",
        a.status.reason
    );
    t0.sched = Some(StoredSched::Unavailable {
        unavailable: vec!["bpf: BPF_PROG_LOAD: Operation not permitted".into()],
    });
    let a = attribute(&t0, &t1);
    assert!(
        a.status.reason.contains("Operation not permitted"),
        "{}",
        a.status.reason
    );
    assert!(a.culprits.is_empty() && a.by_tid.is_empty());
}
