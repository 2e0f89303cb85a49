//! `stealscope sim SCENARIO`: runs a scenario's cases through the
//! simulator and prints the comparison (text or JSON).

use clap::{Args, ValueEnum};
use std::path::PathBuf;
use stealscope_output::json::or_text;
use stealscope_sim::scenario::PolicyKind;
use stealscope_sim::{simulate, Options, Scenario};

type Error = Box<dyn std::error::Error>;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyArg {
    None,
    Numad,
    Stealscope,
}

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Scenario file (TOML; see scenarios/README.md)
    pub scenario: PathBuf,
    /// Machine-readable output (schema stealscope/sim/1)
    #[arg(long)]
    pub json: bool,
    /// Repeat each case with seeds 1..=N (default: the scenario's `seeds`)
    #[arg(long, value_name = "N", conflicts_with = "seed", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub seeds: Option<u64>,
    /// Run each case once with this seed
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Only the cases with this policy (repeatable)
    #[arg(long, value_enum)]
    pub policy: Vec<PolicyArg>,
    /// Only the case of this name (repeatable)
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<String>,
    /// Also run the scenario's [fleet] (always run when it has no [[vm]])
    #[arg(long)]
    pub fleet: bool,
    /// Number of fleet hosts (overrides [fleet] hosts)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub hosts: Option<u32>,
    /// Simulate every tick instead of summing steady stretches: exact,
    /// slower (the fleet's policy comparison uses it: the summing shifts
    /// the VM steal tails by tenths of a point, as much as policies differ)
    #[arg(long)]
    pub every_tick: bool,
}

/// Keeps the cases `names` names (all when empty); an unknown name is an
/// error listing the scenario's cases.
fn only_named(s: &mut Scenario, names: &[String]) -> Result<(), String> {
    if let Some(n) = names
        .iter()
        .find(|n| !s.cases.iter().any(|c| &c.name == *n))
    {
        let all: Vec<&str> = s.cases.iter().map(|c| c.name.as_str()).collect();
        return Err(format!(
            "no case named {n:?} (its cases: {})",
            all.join(", ")
        ));
    }
    if !names.is_empty() {
        s.cases.retain(|c| names.contains(&c.name));
    }
    Ok(())
}

pub fn run(a: &SimArgs) -> Result<(), Error> {
    let mut s = Scenario::load(&a.scenario)?;
    only_named(&mut s, &a.cases).map_err(|e| format!("{}: {e}", a.scenario.display()))?;
    let seeds = match (a.seed, a.seeds) {
        (Some(s), _) => vec![s],
        (None, Some(n)) => (1..=n).collect(),
        (None, None) => Vec::new(),
    };
    let o = Options {
        seeds,
        policies: a
            .policy
            .iter()
            .map(|p| match p {
                PolicyArg::None => PolicyKind::None,
                PolicyArg::Numad => PolicyKind::Numad,
                PolicyArg::Stealscope => PolicyKind::Stealscope,
            })
            .collect(),
        fleet: a.fleet || a.hosts.is_some(),
        hosts: a.hosts,
        every_tick: a.every_tick,
    };
    let r = simulate(&s, &o);
    if r.cases.is_empty() && r.fleet.is_none() {
        return Err(format!("{}: no case matches --policy", a.scenario.display()).into());
    }
    let text = or_text(a.json, &r, || stealscope_output::sim::render(&r));
    crate::write_stdout(&text)
}
