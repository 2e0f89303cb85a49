use super::*;
use stealscope_who::{Kind, Route, SchedStats, Thread, ThreadWaits};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn vm(pid: u32, name: &str) -> (u32, String) {
    (pid, name.into())
}

fn th(pid: u32, tid: u32, role: ThreadRole, run_ns: u64, wait_ns: u64) -> ThreadSample {
    ThreadSample {
        pid,
        tid,
        role,
        sched: TaskSchedstat {
            run_ns,
            wait_ns,
            slices: 1,
        },
    }
}

fn culprit(tid: u32, tgid: u32, comm: &str) -> Thread {
    Thread {
        tid,
        tgid,
        comm: comm.into(),
        kthread: false,
    }
}

/// One watched thread in a reading: tid, (culprit, ns) charges, idle ns.
type Watched<'a> = (u32, &'a [(Thread, u64)], u64);

/// A collector reading of watched threads.
fn reading(threads: &[Watched]) -> SchedSample {
    SchedSample {
        route: Route::Tracefs,
        monotonic_ns: 0,
        threads: threads
            .iter()
            .map(|(tid, by, idle)| {
                let w = ThreadWaits {
                    tid: *tid,
                    by_thread: by.iter().cloned().collect(),
                    idle_ns: *idle,
                    ..Default::default()
                };
                (*tid, w)
            })
            .collect(),
        stats: SchedStats::default(),
        procs: Default::default(),
    }
}

fn place(tid: u32) -> Placement {
    Placement {
        cpu: Some(tid % 2),
        affinity: Some("0-1".into()),
    }
}

#[test]
fn wait_and_run_per_vcpu_and_vm_with_history() {
    let vms = [vm(10, "a")];
    let mut h = LiveHost::new(3);
    let scan = |k: u64| {
        [
            th(10, 11, ThreadRole::Vcpu(0), k * 400 * MS, k * 500 * MS),
            th(10, 12, ThreadRole::Vcpu(1), k * 900 * MS, k * 100 * MS),
            th(10, 13, ThreadRole::Emulator, k * 10 * MS, 0),
        ]
    };
    h.push(S, &vms, &scan(1), place, None);
    let r = &h.rows()[0];
    assert_eq!((r.vm.as_str(), r.vcpus.len()), ("a", 2));
    assert_eq!(r.wait_pct, None, "one scan measures nothing");
    assert_eq!(r.vcpus[0].placement, place(11));
    for k in 2..=5 {
        h.push(k * S, &vms, &scan(k), place, None);
    }
    let r = &h.rows()[0];
    let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
    assert!(near(r.vcpus[0].wait_pct, 50.0) && near(r.vcpus[0].run_pct, 40.0));
    assert!(near(r.vcpus[1].wait_pct, 10.0) && near(r.vcpus[1].run_pct, 90.0));
    assert!(near(r.wait_pct, 30.0) && near(r.run_pct, 65.0));
    // Three scans kept, newest last.
    assert_eq!(r.history.len(), 3);
    assert!(near(*r.history.back().unwrap(), 30.0));
    assert_eq!(r.vcpus[1].history.len(), 3);
    assert_eq!(r.culprits, None, "no collector: n/a");
    // A reused thread id (counters went back) is not measured.
    h.push(6 * S, &vms, &scan(1), place, None);
    assert_eq!(h.rows()[0].vcpus[0].wait_pct, None);
}

/// Scans stamped closer than their reads (a scan stalled before reading,
/// seen in `top` under load as 106 % wait + 65 % run): a vCPU that waited
/// 0.9 s and ran 0.6 s between stamps 1 s apart shows its split of the
/// 1.5 s it must have spanned, never more than 100 % together.
#[test]
fn wait_and_run_never_exceed_the_time_that_passed() {
    let vms = [vm(10, "a")];
    let mut h = LiveHost::new(3);
    let scan = |k: u64| [th(10, 11, ThreadRole::Vcpu(0), k * 600 * MS, k * 900 * MS)];
    h.push(S, &vms, &scan(1), place, None);
    h.push(2 * S, &vms, &scan(2), place, None);
    let c = &h.rows()[0].vcpus[0];
    let (w, r) = (c.wait_pct.unwrap(), c.run_pct.unwrap());
    assert!(
        (w - 60.0).abs() < 1e-9 && (r - 40.0).abs() < 1e-9,
        "{w} {r}"
    );
}

#[test]
fn culprits_per_vcpu_and_per_vm_named_by_the_scan() {
    let vms = [vm(10, "a"), vm(20, "b")];
    let threads = |k: u64| {
        [
            th(10, 11, ThreadRole::Vcpu(0), k * S, k * 400 * MS),
            th(20, 21, ThreadRole::Vcpu(0), k * S, k * 50 * MS),
            th(20, 22, ThreadRole::Emulator, 0, 0),
        ]
    };
    let hog = culprit(99, 99, "hog");
    let b_vcpu = culprit(21, 20, "CPU 0/TCG");
    let b_emu = culprit(22, 20, "qemu-system-x86");
    let r0 = reading(&[(11, &[], 0), (21, &[], 0)]);
    let r1 = reading(&[
        (
            11,
            &[(hog.clone(), 300 * MS), (b_vcpu.clone(), 100 * MS)],
            0,
        ),
        (21, &[(b_emu.clone(), 50 * MS)], 0),
    ]);
    let mut h = LiveHost::new(10);
    h.push(S, &vms, &threads(1), place, Some(&r0));
    assert!(h.rows().iter().all(|r| r.culprits.is_none()));
    h.push(2 * S, &vms, &threads(2), place, Some(&r1));
    let a = &h.rows()[0];
    let c = a.culprits.as_ref().unwrap();
    assert_eq!(
        (
            c[0].culprit.kind,
            c[0].culprit.name.as_str(),
            c[0].culprit.pid
        ),
        (Kind::HostProcess, "hog", Some(99))
    );
    assert!((c[0].share - 0.75).abs() < 1e-9);
    assert_eq!(
        (c[1].culprit.kind, c[1].culprit.name.as_str()),
        (Kind::Vcpu, "b")
    );
    assert!((c[1].seconds - 0.1).abs() < 1e-9);
    assert_eq!(a.vcpus[0].culprits.as_ref().unwrap().len(), 2);
    let b = &h.rows()[1];
    let c = b.culprits.as_ref().unwrap();
    assert_eq!(
        (c[0].culprit.kind, c[0].culprit.name.as_str(), c[0].share),
        (Kind::Vmm, "b", 1.0)
    );
}
