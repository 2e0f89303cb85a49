//! The prediction on a fixture host: this machine with three busy loops the
//! test starts and presents to the predictor as one-vCPU "VMs" (their
//! threads are what a vCPU is to the kernel). Their demand is sampled, the
//! simulator predicts the layout now (every loop free on every CPU) and a
//! plan pinning all three to CPU 0; then the test measures each layout
//! itself and the prediction must be within 5 pp of it. No root, no QEMU.
//! The machine is shared with other work (which the prediction counts as
//! host work): three rounds, the median must hold, every round is printed.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::Duration;
use stealscope_engine::place_demand::{self, Recorder, STEP};
use stealscope_placement::input::{ThreadInput, Topology, VmInput};
use stealscope_placement::{synthetic, Action, HostInput, Knob, Plan};

struct Loops(Vec<Child>);
impl Drop for Loops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn online() -> Vec<u32> {
    let t = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    stealscope_readers::cpulist::parse(t.trim(), "online").unwrap()
}

fn set_affinity(pid: u32, cpus: &[u32]) {
    let list = stealscope_readers::cpulist::format(cpus);
    let ok = Command::new("taskset")
        .args(["-p", "-c", &list, &pid.to_string()])
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "taskset {pid} {list}");
}

fn fixture_host(loops: &[u32], cpus: &[u32]) -> HostInput {
    let mut h = synthetic::host(1, cpus.len() as u32, false, 8 << 30, 0.5);
    h.topology = Topology {
        cpus: cpus.to_vec(),
        cores: cpus.iter().map(|c| vec![*c]).collect(),
        nodes: h.topology.nodes.clone(),
    };
    h.topology.nodes[0].cpus = cpus.to_vec();
    for &pid in loops {
        h.vms.push(VmInput {
            pid,
            name: format!("loop{pid}"),
            knob: Knob::Direct,
            vcpus: vec![(
                0,
                ThreadInput {
                    tid: pid,
                    util: None,
                    cpus_allowed: cpus.to_vec(),
                },
            )],
            others: Vec::new(),
            mem_by_node: Some(BTreeMap::from([(0, 1 << 20)])),
            mem_policy: None,
            cpu_group: None,
            cpu_weight: None,
            autogroup: None,
            wait: None,
        });
    }
    h
}

fn sample_for(rec: &mut Recorder, span: Duration) {
    rec.sample();
    rec.begin_window();
    let n = (span.as_secs_f64() / STEP.as_secs_f64()).round() as u32;
    for _ in 0..n {
        std::thread::sleep(STEP);
        rec.sample();
    }
}

/// One round: three loops, the prediction, both layouts measured. Err
/// when the host's other work changed by more than a tenth (at least 0.3
/// CPUs) between the prediction's window and the measured ones (the other
/// helpers' builds).
fn round_of(cpus: &[u32]) -> Result<[(f64, f64); 2], String> {
    let loops = Loops(
        (0..3)
            .map(|_| {
                // A session (so an autogroup) of its own each, as a VM
                // started by a service has.
                Command::new("setsid")
                    .args(["sh", "-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let pids: Vec<u32> = loops.0.iter().map(Child::id).collect();
    let host = fixture_host(&pids, cpus);
    let plan = Plan {
        actions: host
            .vms
            .iter()
            .map(|v| Action::Affinity {
                vm: v.name.clone(),
                pid: v.pid,
                tid: v.pid,
                vcpu: Some(0),
                cpus: vec![cpus[0]],
                from: cpus.to_vec(),
                via: Knob::Direct,
                reason: "test".into(),
            })
            .collect(),
        ..Default::default()
    };
    let mut rec = Recorder::new();
    sample_for(&mut rec, Duration::from_secs(3));
    let pred = place_demand::predict(&host, &rec, &plan);
    sample_for(&mut rec, Duration::from_secs(3));
    let now = place_demand::measured(&host, &rec, &pids);
    for p in &pids {
        set_affinity(*p, &cpus[..1]);
    }
    std::thread::sleep(Duration::from_millis(500));
    sample_for(&mut rec, Duration::from_secs(3));
    let after = place_demand::measured(&host, &rec, &pids);
    drop(loops);
    let h = pred.current.host_demand_cpus;
    for m in [&now, &after] {
        if (m.host_demand_cpus - h).abs() > (0.1 * h).max(0.3) {
            return Err(format!(
                "other work {h:.2} CPUs at the prediction, {:.2} measured",
                m.host_demand_cpus
            ));
        }
    }
    Ok([
        (pred.current.mean_steal_pct, now.mean_steal_pct),
        (pred.planned.mean_steal_pct, after.mean_steal_pct),
    ])
}

#[test]
fn prediction_within_5_pp_of_the_measured_steal_on_a_fixture_host() {
    let cpus = online();
    if cpus.len() < 2 {
        eprintln!("needs two CPUs");
        return;
    }
    let mut errs = [Vec::new(), Vec::new()];
    for round in 1..=6 {
        match round_of(&cpus) {
            Err(why) => eprintln!("round {round} rejected: {why}"),
            Ok(r) => {
                for (k, (p, m)) in r.into_iter().enumerate() {
                    let e = (p - m).abs();
                    eprintln!(
                        "round {round} {}: predicted {p:.1} %, measured {m:.1} %{}",
                        ["now", "pinned"][k],
                        if e > 5.0 {
                            " (off by more than 5 pp)"
                        } else {
                            ""
                        }
                    );
                    errs[k].push(e);
                }
            }
        }
        if errs[0].len() == 3 {
            break;
        }
    }
    if errs[0].len() < 2 {
        // Locally a host this busy skips; in CI it must not happen.
        stealscope_testkit::skip(&format!(
            "the host's other work kept changing: too few steady rounds {errs:?}"
        ));
        return;
    }
    for (k, e) in errs.iter().enumerate() {
        let mut v = e.clone();
        v.sort_by(f64::total_cmp);
        assert!(v[v.len() / 2] <= 5.0, "{}: {e:?}", ["now", "pinned"][k]);
    }
}
