//! `stealscope fleet plan|status`: the fleet view read from Prometheus
//! (crates/fleet); this file parses the flags and prints.

use crate::parse::parse_duration;
use clap::{Args, Subcommand, ValueEnum};
use std::time::{Duration, Instant};
use stealscope_fleet::prom::Prom;
use stealscope_fleet::render::{self, Target};
use stealscope_fleet::{plan, predict, read, status, PlanOptions, Planner, ReadOptions};

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub cmd: FleetCmd,
}

#[derive(Args, Debug, Clone)]
pub struct Source {
    /// Prometheus (or Thanos, Mimir: anything answering /api/v1/query)
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// Label matchers added to every query, e.g. job="stealscope",dc="eu1"
    #[arg(long, default_value = "")]
    pub selector: String,
    /// How much of the past to read (a Prometheus duration: 30m, 1h, 1d)
    #[arg(long, default_value = "1h")]
    pub window: String,
    /// Points of each VM's demand history over the window
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=2000))]
    pub steps: u32,
    /// Give up on a query after this long
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Evaluate at this time (Unix seconds) instead of now
    #[arg(long, value_name = "UNIX_S")]
    pub time: Option<f64>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
}

/// How `fleet plan` chooses its moves (stealscope_fleet::Planner).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannerArg {
    /// Host by host, worst first, until each is under its limit
    PerHost,
    /// Across all hot hosts, the move that removes most busy steal first
    Gain,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandsArg {
    Virsh,
    Openstack,
    Kubevirt,
}

#[derive(Subcommand, Debug)]
pub enum FleetCmd {
    /// Propose live migrations that take busy steal off hot hosts
    Plan {
        #[command(flatten)]
        src: Source,
        /// At most this many migrations
        #[arg(long, default_value_t = 20)]
        max_moves: usize,
        /// A host is hot above this busy steal per vCPU, percent
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
        /// Keep this share of a host's CPUs free of runnable demand, percent
        #[arg(long, default_value_t = 10.0)]
        headroom: f64,
        /// How moves are chosen
        #[arg(long, value_enum, default_value = "gain")]
        planner: PlannerArg,
        /// Gain-ranked: stop when the next move would remove less busy
        /// steal than this share of its host's vCPU time, percent
        #[arg(long, default_value_t = 1.0)]
        min_gain: f64,
        /// Print only the commands for one tool (stealscope runs none)
        #[arg(long, value_enum)]
        commands: Option<CommandsArg>,
    },
    /// Hosts ranked by busy steal, idle steal to fix locally, who stole it
    Status {
        #[command(flatten)]
        src: Source,
        /// Rows of hosts and of VMs shown in the table
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
}

fn open(src: &Source) -> Result<(Prom, stealscope_fleet::Fleet), Error> {
    let mut prom = Prom::new(&src.prometheus, src.timeout)?;
    prom.at = src.time;
    let fleet = read(
        &mut prom,
        &ReadOptions {
            selector: src.selector.clone(),
            window: src.window.clone(),
            steps: src.steps,
        },
    )?;
    Ok((prom, fleet))
}

fn percent(name: &str, v: f64) -> Result<f64, Error> {
    if !(0.0..100.0).contains(&v) {
        return Err(format!("--{name} {v}: expected a percentage within [0, 100)").into());
    }
    Ok(v / 100.0)
}

pub fn run(a: &FleetArgs) -> Result<(), Error> {
    match &a.cmd {
        FleetCmd::Plan {
            src,
            max_moves,
            threshold,
            headroom,
            planner,
            min_gain,
            commands,
        } => {
            let o = PlanOptions {
                threshold: percent("threshold", *threshold)?,
                headroom: percent("headroom", *headroom)?,
                max_moves: *max_moves,
                planner: match planner {
                    PlannerArg::PerHost => Planner::PerHost,
                    PlannerArg::Gain => Planner::Gain,
                },
                min_gain: percent("min-gain", *min_gain)?,
                ..PlanOptions::default()
            };
            let (prom, fleet) = open(src)?;
            let t0 = Instant::now();
            let p = plan(&fleet, &o);
            let prediction = predict::predict(&fleet, &p);
            let r = render::report(&render::Inputs {
                url: prom.url(),
                fleet: &fleet,
                plan: &p,
                prediction: &prediction,
                queries: &prom.costs,
                plan_seconds: t0.elapsed().as_secs_f64(),
            });
            let text = match (commands, src.json) {
                (_, true) => serde_json::to_string_pretty(&r)?,
                (Some(c), false) => render::command_lines(
                    &r,
                    match c {
                        CommandsArg::Virsh => Target::Virsh,
                        CommandsArg::Openstack => Target::Openstack,
                        CommandsArg::Kubevirt => Target::Kubevirt,
                    },
                ),
                (None, false) => render::text(&r),
            };
            crate::write_stdout(&text)
        }
        FleetCmd::Status { src, top } => {
            let (prom, fleet) = open(src)?;
            let r = status::status(prom.url(), &fleet, &prom.costs, *top);
            let text = if src.json {
                serde_json::to_string_pretty(&r)?
            } else {
                status::text(&r, *top)
            };
            crate::write_stdout(&text)
        }
    }
}
