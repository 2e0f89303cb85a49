//! `stealscope place plan|apply|daemon|undo|move-memory`: the placement
//! daemon. Everything that changes the host is a dry run unless `--yes`.
//! Arguments and printing only: what each verb does is in
//! crates/engine (`place_ops`, and `place` for the daemon).

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use stealscope_actuators::apply::ApplyReport;
use stealscope_engine::place_daemon;
use stealscope_engine::place_ops::{self, Applied, ApplyOptions, Setup};
use stealscope_output::json::or_text;
use stealscope_output::place::width;

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct PlaceArgs {
    #[command(subcommand)]
    pub cmd: PlaceCmd,
}

#[derive(Args, Debug, Clone)]
pub struct PlaceCommon {
    /// Placement config (TOML); a missing default file means defaults
    #[arg(long, value_name = "PATH", default_value = stealscope_placement::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Journal file (overrides the config's `journal`)
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// Machine-readable output
    #[arg(long)]
    pub json: bool,
    /// Place even when automatic NUMA balancing or numad would fight the plan
    #[arg(long)]
    pub override_conflicts: bool,
}

#[derive(Subcommand, Debug)]
pub enum PlaceCmd {
    /// What the placement would be and why; changes nothing
    #[command(
        after_help = "Examples:\n  stealscope place plan\n  stealscope place plan --interval 10s --json | jq '.actions[]'\n\n\
                            Demand is measured over --interval (each thread's run time). Every VM gets its reasons; \
                            every action names the value it replaces. `predicted:` is the simulator's replay of the \
                            measured demand on the layout now and on the planned one (mean steal, p99 of the VMs' \
                            steal, spread, throughput, the host's own work's steal and CPU); `apply` refuses a plan \
                            predicted worse beyond noise (the spread over 3 seeds plus 1 pp of steal, 1 % of throughput \
                            or 5 % of host work's CPUs) unless --force."
    )]
    Plan(PlanArgs),
    /// Apply the plan: a dry run unless --yes; journaled, then reversible with `undo`
    #[command(
        after_help = "Examples:\n  stealscope place apply                 shows each action with the live value it would replace\n  \
                            stealscope place apply --yes\n\n\
                            Refused (exit 2, nothing changed) when automatic NUMA balancing or numad would fight the plan \
                            (override_conflicts = true in the config), when a planned CPU went offline or a cgroup vanished, \
                            or when the simulator predicts the plan worse than the layout now (unless --force). \
                            A failure mid-batch rolls the batch back; a VM that exits mid-batch is skipped. After the \
                            batch a watchdog watches for --watch: a task runnable for 4 s that gets under 2 % of a CPU \
                            undoes the batch (exit 2, the reason logged)."
    )]
    Apply(ApplyArgs),
    /// Plan and apply every --interval (dry run unless --yes), logging each decision
    #[command(
        after_help = "Examples:\n  stealscope place daemon --yes\n  stealscope place daemon --interval 30s      log what it would do\n\n\
                            On start it settles any action a crash left half-done (from the journal and the live system). \
                            Each plan is predicted first and refused when predicted worse (unless --force); after each \
                            batch the watchdog undoes it if a task starves, and the next pass logs the batch's measured \
                            result beside its prediction. SIGTERM or Ctrl-C stop it between passes."
    )]
    Daemon(DaemonArgs),
    /// Restore the placement from before the last apply (dry run unless --yes)
    #[command(after_help = "Examples:\n  stealscope place undo\n  stealscope place undo --yes")]
    Undo(UndoArgs),
    /// Move a process's memory to one NUMA node in steps, refusing unsafe moves
    #[command(
        after_help = "Examples:\n  stealscope place move-memory --pid 4242 --node 1          dry run: checks only\n  \
                            stealscope place move-memory --pid 4242 --node 1 --yes\n\n\
                            Before each step the node must keep its free-memory margin, swap headroom must hold and \
                            memory pressure (PSI) must stay below the config's psi_memory_stop."
    )]
    MoveMemory(MoveMemoryArgs),
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub common: PlaceCommon,
    /// How long to measure each thread's demand
    #[arg(long, default_value = "2s", value_parser = crate::parse::parse_duration)]
    pub interval: Duration,
}

#[derive(Args, Debug)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Apply exactly this saved plan (`place plan --json > FILE`) instead of planning now
    #[arg(long = "plan", value_name = "FILE")]
    pub plan_file: Option<PathBuf>,
    /// Really apply (default: dry run)
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub safety: Safety,
}

/// What guards a batch: the prediction and the watchdog.
#[derive(Args, Debug, Clone)]
pub struct Safety {
    /// Apply a plan even when the simulator predicts it worse
    #[arg(long)]
    pub force: bool,
    /// How long the watchdog watches for a starving task after each batch (0s: not at all)
    #[arg(long, default_value = "6s", value_parser = parse_watch)]
    pub watch: Duration,
}

/// A duration as everywhere, or 0 (`0`, `0s`): no watching. Shorter than
/// the span a task is judged over, the watchdog could see nothing.
fn parse_watch(s: &str) -> Result<Duration, String> {
    if s.trim_end_matches(['s', 'm']).trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let d = crate::parse::parse_duration(s)?;
    let least = stealscope_engine::place_watch::WINDOW + Duration::from_secs(1);
    if d < least {
        return Err(format!(
            "{s}: the watchdog judges a task over {} s; watch {} s at least (or 0 for not at all)",
            stealscope_engine::place_watch::WINDOW.as_secs(),
            least.as_secs()
        ));
    }
    Ok(d)
}

#[derive(Args, Debug)]
pub struct DaemonArgs {
    #[command(flatten)]
    pub common: PlaceCommon,
    /// Time between passes (overrides the config's interval_s); demand is measured over it
    #[arg(long, value_parser = crate::parse::parse_duration)]
    pub interval: Option<Duration>,
    /// Really apply (default: log what it would do)
    #[arg(long)]
    pub yes: bool,
    /// Stop after this many passes (default: run until stopped)
    #[arg(long, value_name = "N")]
    pub passes: Option<u64>,
    #[command(flatten)]
    pub safety: Safety,
}

#[derive(Args, Debug)]
pub struct UndoArgs {
    #[command(flatten)]
    pub common: PlaceCommon,
    /// Really restore (default: dry run)
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct MoveMemoryArgs {
    #[command(flatten)]
    pub common: PlaceCommon,
    #[arg(long)]
    pub pid: u32,
    #[arg(long)]
    pub node: u32,
    /// Really move (default: dry run)
    #[arg(long)]
    pub yes: bool,
}

fn setup(c: &PlaceCommon) -> Result<Setup, Error> {
    Setup::load(&c.config, c.journal.as_deref(), c.override_conflicts)
}

fn print_report(r: &ApplyReport, json: bool) -> Result<(), Error> {
    crate::write_stdout(&or_text(json, r, || {
        stealscope_output::place::apply_report(r, width())
    }))
}

fn apply_cmd(a: &ApplyArgs) -> Result<(), Error> {
    let s = setup(&a.plan.common)?;
    let Applied {
        plan: p,
        report: r,
        undone,
    } = place_ops::apply(
        &s,
        &ApplyOptions {
            plan_file: a.plan_file.as_deref(),
            interval: a.plan.interval,
            yes: a.yes,
            force: a.safety.force,
            watch: a.safety.watch,
        },
    )?;
    if a.yes {
        print_report(&r, a.plan.common.json)?;
    } else {
        crate::write_stdout(&stealscope_output::place::dry_run(
            &p.plan,
            p.prediction.as_ref(),
            &r,
            a.plan.common.json,
            width(),
        ))?;
    }
    if let Some(u) = undone {
        if let Some(ur) = &u.report {
            print_report(ur, a.plan.common.json)?;
        }
        return Err(u.why.into());
    }
    match &r.error {
        Some(e) => Err(format!("apply failed: {e}").into()),
        None => Ok(()),
    }
}

fn undo_cmd(a: &UndoArgs) -> Result<(), Error> {
    let r = place_ops::undo(&setup(&a.common)?, a.yes)?;
    print_report(&r, a.common.json)?;
    match &r.error {
        Some(e) => Err(format!("undo failed: {e}").into()),
        None => Ok(()),
    }
}

fn daemon_cmd(a: &DaemonArgs) -> Result<(), Error> {
    let Setup { cfg, journal } = setup(&a.common)?;
    let interval = a.interval.unwrap_or_else(|| cfg.interval());
    place_daemon::daemon(&place_daemon::DaemonOptions {
        cfg,
        journal,
        interval,
        yes: a.yes,
        passes: a.passes,
        force: a.safety.force,
        watch: a.safety.watch,
    })
}

pub fn run(a: &PlaceArgs) -> Result<(), Error> {
    match &a.cmd {
        PlaceCmd::Plan(p) => {
            let planned = place_ops::plan_now(&setup(&p.common)?, p.interval)?;
            crate::write_stdout(&or_text(p.common.json, &planned, || {
                stealscope_output::place::plan(&planned.plan, planned.prediction.as_ref(), width())
            }))
        }
        PlaceCmd::Apply(x) => apply_cmd(x),
        PlaceCmd::Undo(x) => undo_cmd(x),
        PlaceCmd::Daemon(x) => daemon_cmd(x),
        PlaceCmd::MoveMemory(m) => {
            let r = place_ops::move_memory(&setup(&m.common)?, m.pid, m.node, m.yes)?;
            crate::write_stdout(&or_text(m.common.json, &r, || {
                stealscope_output::place::move_report(&r, !m.yes)
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_shorter_than_the_window_is_refused_with_the_least() {
        assert_eq!(parse_watch("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_watch("6s"), Ok(Duration::from_secs(6)));
        let e = parse_watch("3s").unwrap_err();
        assert!(e.starts_with("3s: ") && e.contains("5 s at least"), "{e}");
    }
}
