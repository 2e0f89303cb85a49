//! `fleet plan`'s own cost at fleet scale, without Prometheus: a synthetic
//! fleet (stealscope_sim::openmetrics::synthetic_sized) replayed step by
//! step to get what `read` would have assembled (demand history, wait,
//! busy steal), then planned and predicted as `fleet plan` does; the
//! plan and prediction's wall and CPU time and the peak RSS are printed.
//! BENCHMARKS.md "Issue 31" has the runs.
//!
//! cargo run --release -p stealscope-fleet --example scale -- HOSTS CPUS STEPS [gain|per-host]
//!
//! The planner is `fleet plan`'s default (gain) unless named.

mod common;

use common::{fleet, host_of};
use rayon::prelude::*;
use std::time::Instant;
use stealscope_fleet::model::{FleetFigures, Host};
use stealscope_fleet::{plan, predict, PlanOptions, Planner};
use stealscope_sim::measured::run_steps_for;
use stealscope_sim::openmetrics::synthetic_sized;

const STEP_S: f64 = 900.0;
/// The synthetic input's own replay, per step (not part of what is timed):
/// at 900 s a step, building 10,000 hosts took some 20 minutes here.
const INPUT_REPLAY_S: f64 = 10.0;

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
    let f = fleet(hosts, STEP_S, steps);
    let vms: usize = f.hosts.iter().map(|h| h.vms.len()).sum();
    println!(
        "{n} hosts of {cpus} CPUs, {vms} VMs, {steps} steps: fleet built in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let planner = match std::env::args().nth(4).as_deref() {
        None => PlanOptions::default().planner,
        Some("gain") => Planner::Gain,
        Some("per-host") => Planner::PerHost,
        Some(x) => panic!("{x}: gain or per-host"),
    };
    let o = PlanOptions {
        max_moves: usize::MAX,
        planner,
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
