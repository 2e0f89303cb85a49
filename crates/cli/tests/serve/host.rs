//! Host side against real QEMU VMs: per-vCPU series appear and vanish.

use super::helpers::*;
use crate::common::testenv::{self, testenv};
use crate::common::*;
use std::time::Duration;

/// (index, thread id) of each vCPU, from QMP.
fn qmp_vcpus(vm: &str) -> Vec<(u64, u64)> {
    testenv::vcpu_threads(&testenv::qmp(vm, "query-cpus-fast", None))
}

/// (run, wait) seconds of a thread.
fn schedstat(pid: u64, tid: u64) -> (f64, f64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap();
    let mut f = s
        .split_whitespace()
        .map(|x| x.parse::<f64>().unwrap() / 1e9);
    (f.next().unwrap(), f.next().unwrap())
}

#[test]
fn vcpu_series_follow_real_qemu_vms() {
    let have_qemu = is_root()
        && repo().join("testenv/start-vm.sh").exists()
        && have("qemu-system-x86_64")
        && have("promtool");
    if !require(have_qemu, "root, qemu-system-x86_64 and promtool") {
        return;
    }
    let _turn = vm_turn();
    let _vms = testenv::Vms;
    let pid_a: u64 = testenv("start-vm.sh", &["svA", "2", "--busy", "1"])
        .parse()
        .unwrap();
    let s = Serve::start(&[]);
    // svB starts after serve: found by the watch for new VMMs.
    let pid_b: u64 = testenv("start-vm.sh", &["svB", "1"]).parse().unwrap();
    let vcpus = [
        ("svA", pid_a, qmp_vcpus("svA")),
        ("svB", pid_b, qmp_vcpus("svB")),
    ];
    wait_for("both VMs' series", Duration::from_secs(10), || {
        let m = s.metrics();
        vcpus
            .iter()
            .all(|(vm, _, v)| {
                m.starting(&format!("stealscope_vcpu_wait_seconds_total{{vm=\"{vm}\""))
                    .len()
                    == v.len()
            })
            .then_some(())
    });
    // Each series is its vCPU thread's schedstat at the last scan (at most
    // a second old): between the test's own readings before and after.
    let before: Vec<_> = vcpus
        .iter()
        .flat_map(|(_, pid, v)| v.iter().map(move |(_, tid)| schedstat(*pid, *tid)))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let resp = get(s.addr, "/metrics", None);
    let m = Exposition::parse(&resp.body);
    let mut i = 0;
    for (vm, pid, v) in &vcpus {
        for (index, tid) in v {
            let after = schedstat(*pid, *tid);
            let labels = format!("{{vm=\"{vm}\",vcpu=\"{index}\"}}");
            let wait = m
                .get(&format!("stealscope_vcpu_wait_seconds_total{labels}"))
                .unwrap();
            let run = m
                .get(&format!("stealscope_vcpu_run_seconds_total{labels}"))
                .unwrap();
            let (r0, w0) = before[i];
            assert!(
                wait >= w0 - 1e-6 && wait <= after.1 + 1e-6,
                "{vm}/{index} wait {wait} not in {w0}..{}",
                after.1
            );
            assert!(
                run >= r0 - 1e-6 && run <= after.0 + 1e-6,
                "{vm}/{index} run {run} not in {r0}..{}",
                after.0
            );
            i += 1;
        }
    }
    promtool_check_metrics(&resp.body);

    // svA goes away: its series with it, svB's stay.
    testenv("stop-vm.sh", &["svA"]);
    wait_for("svA's series to vanish", Duration::from_secs(5), || {
        let m = s.metrics();
        (m.starting("stealscope_vcpu_wait_seconds_total{vm=\"svA\"")
            .is_empty()
            && m.starting("stealscope_vcpu_run_seconds_total{vm=\"svA\"")
                .is_empty())
        .then_some(())
    });
    let m = s.metrics();
    assert_eq!(
        m.starting("stealscope_vcpu_wait_seconds_total{vm=\"svB\"")
            .len(),
        1
    );
}
