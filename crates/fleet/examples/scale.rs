//! `fleet plan`'s own cost at fleet scale, without Prometheus: a synthetic
//! fleet (stealscope_sim::openmetrics::synthetic_sized) replayed step by
//! step to get what `read` would have assembled (demand history, wait,
//! busy steal), then planned and predicted as `fleet plan` does; the
//! plan and prediction's wall and CPU time and the peak RSS are printed.
//! BENCHMARKS.md "Issue 31" has the runs.
//!
//! cargo run --release -p stealscope-fleet --example scale -- HOSTS CPUS STEPS [gain]

use rayon::prelude::*;
use std::time::Instant;
use stealscope_fleet::model::{Fleet, FleetFigures, Host, HostKey, NodeMem, Vm};
use stealscope_fleet::want::want;
use stealscope_fleet::{plan, predict, PlanOptions, Planner};
use stealscope_sim::measured::{run_steps_for, summarize, HostRun};
use stealscope_sim::openmetrics::{synthetic_sized, SynthHost};

const STEP_S: f64 = 900.0;
/// The synthetic input's own replay, per step (not part of what is timed):
/// at 900 s a step, building 10,000 hosts took some 20 minutes here.
const INPUT_REPLAY_S: f64 = 10.0;
const GIB: f64 = (1u64 << 30) as f64;

/// A host as `read` assembles it from its step runs (no culprits).
fn host_of(h: &SynthHost, r: &[HostRun]) -> Host {
    let secs: f64 = r.iter().map(|x| x.secs).sum();
    let vms = h
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| Vm {
            name: v.vm.name.clone(),
            uuid: v.uuid.clone(),
            vcpus: v.vm.vcpus,
            memory_bytes: Some((v.vm.mem_gib * GIB) as u64),
            demand: want(
                &r.iter().map(|x| x.vm_run[i] / x.secs).collect::<Vec<_>>(),
                &r.iter()
                    .map(|x| (x.vm_run[i] + x.vm_wait[i]) / x.secs)
                    .collect::<Vec<_>>(),
                v.vm.vcpus,
            ),
            wait: r.iter().map(|x| x.vm_wait[i]).sum::<f64>() / secs,
            run: r.iter().map(|x| x.vm_run[i]).sum::<f64>() / secs,
        })
        .collect();
    let used = h.vms.iter().map(|v| v.vm.mem_gib).sum::<f64>() / h.nodes as f64;
    let free = ((h.mem_gib_per_node - used).max(0.0) * GIB) as u64;
    Host {
        key: HostKey {
            instance: h.instance(),
            job: "stealscope".into(),
        },
        name: h.name.clone(),
        cpus: h.cpus,
        nodes: (0..h.nodes)
            .map(|node| NodeMem {
                node,
                free_bytes: free,
            })
            .collect(),
        vms,
        busy: summarize(r).busy_steal,
        culprits: Vec::new(),
    }
}

/// CPU seconds (user + system, all threads) and peak RSS in MiB so far:
/// on a shared machine CPU time says more than wall time.
fn usage() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        secs(r.ru_utime) + secs(r.ru_stime),
        r.ru_maxrss as f64 / 1024.0,
    )
}

fn arg(i: usize, default: u32) -> u32 {
    std::env::args()
        .nth(i)
        .map_or(default, |s| s.parse().expect("a number"))
}

fn main() {
    let (n, cpus, steps) = (arg(1, 10_000), arg(2, 28), arg(3, 4) as usize);
    let t0 = Instant::now();
    let synth = synthetic_sized(n, cpus, steps, STEP_S, 1);
    let hosts: Vec<Host> = synth
        .par_iter()
        .map(|h| {
            let r = run_steps_for(h.cpus, &h.measured(), STEP_S, INPUT_REPLAY_S, 1);
            host_of(h, &r)
        })
        .collect();
    let f = Fleet {
        window_s: STEP_S * steps as f64,
        step_s: STEP_S,
        hosts,
        unseen: Vec::new(),
    };
    let vms: usize = f.hosts.iter().map(|h| h.vms.len()).sum();
    println!(
        "{n} hosts of {cpus} CPUs, {vms} VMs, {steps} steps: fleet built in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let gain = std::env::args().nth(4).is_some_and(|a| a == "gain");
    let o = PlanOptions {
        max_moves: usize::MAX,
        planner: if gain {
            Planner::Gain
        } else {
            Planner::PerHost
        },
        ..PlanOptions::default()
    };
    let (cpu0, _) = usage();
    let t1 = Instant::now();
    let p = plan(&f, &o);
    let plan_s = t1.elapsed().as_secs_f64();
    let pr = predict::predict(&f, &p);
    let (cpu1, rss) = usage();
    println!(
        "hot {} moves {} unfixed {}: choice {plan_s:.2} s, prediction {:.2} s ({} runs)",
        p.hot.len(),
        p.moves.len(),
        p.unfixed.len(),
        pr.sim_seconds,
        pr.sim_runs
    );
    println!(
        "plan + prediction: {:.2} s wall, {:.2} s CPU; peak RSS {rss:.0} MiB",
        t1.elapsed().as_secs_f64(),
        cpu1 - cpu0
    );
    let show = |x: &FleetFigures| {
        format!(
            "busy {:.2} %, p99 {:.1} %, over 10 % {}",
            x.busy_steal_pct, x.vm_steal_p99, x.vms_over_10pct
        )
    };
    println!("before {}\npredicted {}", show(&pr.before), show(&pr.after));
}
