//! `stealscope sim`: what a placement policy does to steal, before it
//! touches a host. A scenario (TOML) describes a host or a fleet, its VMs
//! and their demand, the cgroup layout and the cases to compare; the
//! simulator runs each case with several seeds through a model of the
//! kernel's CFS group scheduling and load balancing (`sched`, `balance`),
//! NUMA costs (`numa`) and the placement policies (`policy`: none, numad's
//! rule, and stealscope's own planner, the code of `place`). Pure: no I/O
//! except reading the scenario and its trace files.

pub mod balance;
pub mod choose;
pub mod cpuset;
pub mod demand;
pub mod engine;
pub mod fleet;
pub mod host;
pub mod measured;
pub mod numa;
pub mod openmetrics;
pub mod policy;
pub mod policy_samples;
pub mod predict;
pub mod range;
pub mod report;
pub mod scenario;
pub mod sched;
pub mod timing;
pub mod values;

pub use report::SimReport;
pub use scenario::{Scenario, ScenarioError};

use engine::{HostShape, RunSpec};
use rayon::prelude::*;

/// What to run beyond the scenario's own settings.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Seeds (repeated runs); empty: 1..=scenario's `seeds`.
    pub seeds: Vec<u64>,
    /// Only the cases with these policies (empty: all).
    pub policies: Vec<scenario::PolicyKind>,
    /// Run the [fleet] section (when the scenario has one).
    pub fleet: bool,
    /// Overrides the fleet's host count.
    pub hosts: Option<u32>,
    /// Simulate every tick (no summing of steady stretches): for checking.
    pub every_tick: bool,
}

pub fn shape(s: &Scenario) -> HostShape {
    let h = &s.file.host;
    let base = s.path.parent().unwrap_or(std::path::Path::new("."));
    HostShape {
        cpus: h.cpus.0 as usize,
        nodes: h.nodes.0 as usize,
        smt: h.smt,
        mem_per_node_gib: h.mem_gib_per_node.0,
        // Checked when the scenario was loaded.
        background: h
            .background
            .iter()
            .flat_map(|b| {
                std::iter::repeat_n(b.thread(base).unwrap_or_default(), b.count.0 as usize)
            })
            .collect(),
    }
}

/// Runs every case of `s` with every seed (in parallel) and reports.
pub fn simulate(s: &Scenario, o: &Options) -> SimReport {
    let seeds: Vec<u64> = if o.seeds.is_empty() {
        (1..=s.file.seeds.0 as u64).collect()
    } else {
        o.seeds.clone()
    };
    let cases: Vec<&scenario::Case> = s
        .cases
        .iter()
        .filter(|c| o.policies.is_empty() || o.policies.contains(&c.policy))
        .collect();
    let shape = shape(s);
    let vms = &s.vms;
    let tick_s = s.file.tick_ms.0 / 1000.0;
    let jobs: Vec<(usize, u64)> = (0..cases.len())
        .flat_map(|c| seeds.iter().map(move |sd| (c, *sd)))
        .collect();
    let outcomes: Vec<engine::RunOutcome> = if vms.is_empty() {
        Vec::new()
    } else {
        jobs.par_iter()
            .map(|&(c, seed)| {
                engine::run(&RunSpec {
                    shape: &shape,
                    sched: &s.file.scheduler,
                    numa: &s.file.numa,
                    case: cases[c],
                    vms,
                    duration_s: s.file.duration_s.0,
                    tick_s,
                    warmup_s: s.file.warmup_s.0,
                    seed,
                    every_tick: o.every_tick,
                    trim: Some(choose::in_sim),
                })
            })
            .collect()
    };
    let mut reports = Vec::new();
    if !outcomes.is_empty() {
        for (c, case) in cases.iter().enumerate() {
            let runs: Vec<engine::RunOutcome> = jobs
                .iter()
                .zip(&outcomes)
                .filter(|((cc, _), _)| *cc == c)
                .map(|(_, r)| r.clone())
                .collect();
            reports.push(report::case_report(case, &runs));
        }
    }
    let fleet = match (&s.file.fleet, o.fleet || vms.is_empty()) {
        (Some(f), true) => {
            let mut f = f.clone();
            if let Some(n) = o.hosts {
                f.hosts = scenario::Count(n.max(1));
            }
            let owned: Vec<scenario::Case> = cases.iter().map(|c| (*c).clone()).collect();
            Some(fleet::run_fleet(
                &f,
                &shape,
                &s.file.scheduler,
                &s.file.numa,
                &owned,
                s.path.parent().unwrap_or(std::path::Path::new(".")),
                s.file.duration_s.0,
                tick_s,
                seeds[0],
                o.every_tick,
            ))
        }
        _ => None,
    };
    SimReport {
        schema: report::SCHEMA,
        scenario: s.name(),
        description: s.file.description.clone(),
        cpus: shape.cpus,
        nodes: shape.nodes,
        duration_s: s.file.duration_s.0,
        warmup_s: s.file.warmup_s.0,
        tick_ms: s.file.tick_ms.0,
        seeds,
        cases: reports,
        fleet,
    }
}
