//! The planners and the anchors' rules on the synthetic fleet, in memory
//! (no Prometheus, no culprits): the fleet replayed step by step as the
//! end-to-end test writes it, assembled as `read` would, each plan
//! predicted, then its moves applied and replayed; one line per plan.
//!
//! cargo run --release -p stealscope-fleet --example compare -- HOSTS SEED [MIN_GAIN_PCT...]
//!
//! PREFIX=1 also prints what each move of the last gain plan and of the
//! DRS-like rule removed, and the hot and fix-locally hosts' steal;
//! AT_DRS=1 adds the gain plan cut one move short of the DRS-like rule's;
//! DIFF=1 each host's busy steal after the per-host and first gain plan.

mod common;

use common::{fleet, host_of};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::Mutex;
use stealscope_fleet::anchors::{drs_like, watcher_like};
use stealscope_fleet::model::{Fleet, FleetFigures, Host};
use stealscope_fleet::predict::predict;
use stealscope_fleet::{plan, Plan, PlanOptions, Planner};
use stealscope_sim::measured::{run_steps, summarize, Summary};
use stealscope_sim::openmetrics::{synthetic, SynthHost};

const STEP_S: f64 = 900.0;
const STEPS: usize = 96;

fn key(h: &SynthHost) -> String {
    let vms: Vec<&str> = h.vms.iter().map(|v| v.vm.name.as_str()).collect();
    format!("{}|{}", h.name, vms.join(","))
}

/// Each host state replayed once, step by step, for all plans.
struct Truth(Mutex<HashMap<String, Summary>>);

impl Truth {
    fn of(&self, hosts: &[SynthHost]) -> FleetFigures {
        let todo: Vec<&SynthHost> = {
            let c = self.0.lock().unwrap();
            hosts.iter().filter(|h| !c.contains_key(&key(h))).collect()
        };
        let done: Vec<(String, Summary)> = todo
            .par_iter()
            .map(|h| {
                (
                    key(h),
                    summarize(&run_steps(h.cpus, &h.measured(), STEP_S, 1)),
                )
            })
            .collect();
        let mut c = self.0.lock().unwrap();
        c.extend(done);
        FleetFigures::of(hosts.iter().map(|h| {
            let r = &c[&key(h)];
            (
                r.busy_steal,
                h.vms.iter().map(|v| v.vm.vcpus).sum(),
                r.vm_steal_pct.clone(),
            )
        }))
    }
}

fn apply(hosts: &[SynthHost], f: &Fleet, p: &Plan) -> Vec<SynthHost> {
    let mut out = hosts.to_vec();
    for m in &p.moves {
        let name = &f.hosts[m.from].vms[m.vm].name;
        let i = out[m.from]
            .vms
            .iter()
            .position(|v| &v.vm.name == name)
            .unwrap();
        let mut v = out[m.from].vms.remove(i);
        v.vm.pinned = None;
        out[m.to].vms.push(v);
    }
    out
}

fn arg(i: usize, default: &str) -> String {
    std::env::args().nth(i).unwrap_or_else(|| default.into())
}

fn main() {
    let n: u32 = arg(1, "24").parse().unwrap();
    let seed: u64 = arg(2, "1").parse().unwrap();
    let gains: Vec<f64> = std::env::args()
        .skip(3)
        .map(|s| s.parse::<f64>().unwrap() / 100.0)
        .collect();
    let synth = synthetic(n, STEPS, STEP_S, seed);
    let live = &synth[..synth.len() - 1];
    let hosts: Vec<Host> = live
        .par_iter()
        .map(|h| host_of(h, &run_steps(h.cpus, &h.measured(), STEP_S, 1)))
        .collect();
    let f = fleet(hosts, STEP_S, STEPS);
    let pinned: Vec<usize> = (0..live.len())
        .filter(|&i| live[i].vms.iter().any(|v| v.vm.pinned.is_some()))
        .collect();
    let truth = Truth(Mutex::new(HashMap::new()));
    let before = truth.of(live);
    let vms: usize = live.iter().map(|h| h.vms.len()).sum();
    println!("{n} hosts seed {seed}, {vms} VMs: before {before:?}");
    let mut plans: Vec<(String, Plan, bool)> = vec![(
        "per-host".into(),
        plan(&f, &opts(Planner::PerHost, 0.01)),
        true,
    )];
    for &g in &gains {
        let name = format!("gain {:.1}%", g * 100.0);
        plans.push((name, plan(&f, &opts(Planner::Gain, g)), true));
    }
    if std::env::var("PREFIX").is_ok() {
        prefixes(&f, live, &truth, &before, &plans[plans.len() - 1].1);
    }
    plans.push(("drs-like".into(), drs_like(&f, 0.05, 10_000), false));
    if std::env::var("AT_DRS").is_ok() {
        // The gain planner cut one move short of the DRS-like rule's count.
        let o = PlanOptions {
            max_moves: plans[plans.len() - 1].1.moves.len().saturating_sub(1),
            ..opts(Planner::Gain, 0.01)
        };
        plans.push(("gain, DRS-1".into(), plan(&f, &o), true));
    }
    if std::env::var("PREFIX").is_ok() {
        prefixes(&f, live, &truth, &before, &plans[plans.len() - 1].1);
        hot_and_local(&f, live);
    }
    plans.push(("watcher-like".into(), watcher_like(&f, 0.8, 10_000), false));
    if std::env::var("DIFF").is_ok() && !gains.is_empty() {
        diff(live, &f, &truth, &plans[0].1, &plans[1].1);
    }
    for (name, p, ours) in &plans {
        let after = truth.of(&apply(live, &f, p));
        let off_idle = p.moves.iter().filter(|m| pinned.contains(&m.from)).count();
        let pred = ours.then(|| predict(&f, p).after);
        let pct = |c: usize| 100.0 * c as f64 / vms as f64;
        print!(
            "{name:>16}: {:3} moves ({off_idle} off pinned), removed {:5.2} pp, busy {:5.2} %, p99 {:5.1}, over10 {:3}",
            p.moves.len(),
            before.busy_steal_pct - after.busy_steal_pct,
            after.busy_steal_pct,
            after.vm_steal_p99,
            after.vms_over_10pct
        );
        match pred {
            Some(x) => println!(
                " | pred busy {:5.2} ({:+.2}), p99 {:5.1} ({:+.1}), over10 {:3} ({:+.2} pp)",
                x.busy_steal_pct,
                x.busy_steal_pct - after.busy_steal_pct,
                x.vm_steal_p99,
                x.vm_steal_p99 - after.vm_steal_p99,
                x.vms_over_10pct,
                pct(x.vms_over_10pct) - pct(after.vms_over_10pct)
            ),
            None => println!(),
        }
    }
}

fn opts(planner: Planner, min_gain: f64) -> PlanOptions {
    PlanOptions {
        max_moves: 500,
        planner,
        min_gain,
        ..PlanOptions::default()
    }
}

/// Truth after each prefix of a plan: what each move removed.
fn prefixes(f: &Fleet, live: &[SynthHost], truth: &Truth, before: &FleetFigures, p: &Plan) {
    for k in 1..=p.moves.len() {
        let q = Plan {
            moves: p.moves[..k].to_vec(),
            ..Plan::default()
        };
        let after = truth.of(&apply(live, f, &q));
        let m = &p.moves[k - 1];
        let (h, v) = (&f.hosts[m.from], &f.hosts[m.from].vms[m.vm]);
        println!(
            "  {k:2}: {} {} ({} vCPUs, mean demand {:.2}) -> {} {:?}: removed {:.2} pp, over10 {}",
            h.name,
            v.name,
            v.vcpus,
            v.mean_demand(),
            f.hosts[m.to].name,
            m.why,
            before.busy_steal_pct - after.busy_steal_pct,
            after.vms_over_10pct
        );
    }
}

/// Per host, busy steal (CPU-s/s) after two plans, where they differ.
fn diff(live: &[SynthHost], f: &Fleet, truth: &Truth, a: &Plan, b: &Plan) {
    let (ha, hb) = (apply(live, f, a), apply(live, f, b));
    truth.of(&ha);
    truth.of(&hb);
    let c = truth.0.lock().unwrap();
    for i in 0..live.len() {
        let (x, y) = (c[&key(&ha[i])].busy_steal, c[&key(&hb[i])].busy_steal);
        if (x - y).abs() > 0.01 {
            println!(
                "  {}: {x:.2} vs {y:.2} ({} vs {} VMs)",
                live[i].name,
                ha[i].vms.len(),
                hb[i].vms.len()
            );
        }
    }
}

/// Busy and idle steal of the hosts the gain planner moves from, and of
/// those it leaves to `place`.
fn hot_and_local(f: &Fleet, live: &[SynthHost]) {
    let p = plan(f, &opts(Planner::Gain, 0.01));
    let vcpus: u32 = live.iter().flat_map(|h| &h.vms).map(|v| v.vm.vcpus).sum();
    for &h in p.hot.iter().chain(&p.local) {
        let x = &f.hosts[h];
        println!(
            "  {} {}: busy {:.2} CPU ({:.2} pp), idle {:.2}, vcpus {}",
            if p.hot.contains(&h) { "hot" } else { "local" },
            x.name,
            x.busy_steal(),
            100.0 * x.busy_steal() / vcpus as f64,
            x.idle_steal(),
            x.vcpus()
        );
    }
}
