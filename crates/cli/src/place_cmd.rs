//! `stealscope place plan|apply|daemon|undo|move-memory`: the placement
//! daemon. Everything that changes the host is a dry run unless `--yes`.

use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;
use stealscope_actuators::apply::{self, ApplyReport};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory;
use stealscope_engine::place::{self, applier, history_from_journal, limits, observe, recover};
use stealscope_placement::{live, plan, Config, Plan};
use stealscope_readers::RootFs;

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
                            every action names the value it replaces."
    )]
    Plan(PlanArgs),
    /// Apply the plan: a dry run unless --yes; journaled, then reversible with `undo`
    #[command(
        after_help = "Examples:\n  stealscope place apply                 shows each action with the live value it would replace\n  \
                            stealscope place apply --yes\n\n\
                            Refused (exit 2, nothing changed) when automatic NUMA balancing or numad would fight the plan \
                            (override_conflicts = true in the config), when a planned CPU went offline or a cgroup vanished. \
                            A failure mid-batch rolls the batch back; a VM that exits mid-batch is skipped."
    )]
    Apply(ApplyArgs),
    /// Plan and apply every --interval (dry run unless --yes), logging each decision
    #[command(
        after_help = "Examples:\n  stealscope place daemon --yes\n  stealscope place daemon --interval 30s      log what it would do\n\n\
                            On start it settles any action a crash left half-done (from the journal and the live system). \
                            SIGTERM or Ctrl-C stop it between passes."
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

fn config(c: &PlaceCommon) -> Result<Config, Error> {
    let explicit = c.config.as_os_str() != stealscope_placement::config::DEFAULT_PATH;
    let mut cfg = Config::load(&c.config, explicit)?;
    cfg.override_conflicts |= c.override_conflicts;
    Ok(cfg)
}

fn journal_path(c: &PlaceCommon, cfg: &Config) -> PathBuf {
    c.journal
        .clone()
        .unwrap_or_else(|| PathBuf::from(&cfg.journal))
}

fn print_plan(p: &Plan, json: bool) -> Result<(), Error> {
    crate::write_stdout(&if json {
        stealscope_output::json::render(p)
    } else {
        stealscope_output::place::plan(p)
    })
}

fn print_report(r: &ApplyReport, json: bool) -> Result<(), Error> {
    crate::write_stdout(&if json {
        stealscope_output::json::render(r)
    } else {
        stealscope_output::place::apply_report(r)
    })
}

fn apply_cmd(a: &ApplyArgs) -> Result<(), Error> {
    let cfg = config(&a.plan.common)?;
    let jpath = journal_path(&a.plan.common, &cfg);
    let ctl = live::cpu_controller(&RootFs::new(Path::new("/")))?;
    if a.yes {
        recover(&jpath, ctl.as_ref())?;
    }
    let p = match &a.plan_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            serde_json::from_str::<Plan>(&text).map_err(|e| {
                format!("{}: not a plan from `place plan --json` ({e})", f.display())
            })?
        }
        None => {
            let host = observe(&cfg, a.plan.interval, None)?;
            let state = journal::read(&jpath)?;
            plan(
                &host,
                &cfg,
                &history_from_journal(&state, &host),
                journal::now(),
            )
        }
    };
    if let Some(why) = &p.refused {
        return Err(format!("refused: {why}").into());
    }
    let mut log = |l: &str| eprintln!("stealscope place: {l}");
    let mut ap = applier(&cfg, jpath, !a.yes, ctl.as_ref(), &mut log);
    let r = ap.apply(&p.actions, BatchKind::Apply, None)?;
    if a.yes {
        print_report(&r, a.plan.common.json)?;
    } else {
        // A dry run shows the plan it would apply, then what each action
        // would replace.
        crate::write_stdout(&if a.plan.common.json {
            let mut v = serde_json::to_value(&r)?;
            v["plan"] = serde_json::to_value(&p)?;
            stealscope_output::json::render(&v)
        } else {
            format!(
                "{}\n{}",
                stealscope_output::place::plan(&p),
                stealscope_output::place::apply_report(&r)
            )
        })?;
    }
    match &r.error {
        Some(e) => Err(format!("apply failed: {e}").into()),
        None => Ok(()),
    }
}

fn undo_cmd(a: &UndoArgs) -> Result<(), Error> {
    let cfg = config(&a.common)?;
    let jpath = journal_path(&a.common, &cfg);
    let ctl = live::cpu_controller(&RootFs::new(Path::new("/")))?;
    if a.yes {
        recover(&jpath, ctl.as_ref())?;
    }
    let state = journal::read(&jpath)?;
    let Some(batch) = state.last_undoable() else {
        return Err(format!(
            "{}: nothing to undo (no applied batch that is not undone yet)",
            jpath.display()
        )
        .into());
    };
    let (actions, notes) = apply::reverse(batch);
    for n in notes {
        eprintln!("stealscope place: {n}");
    }
    let mut log = |l: &str| eprintln!("stealscope place: {l}");
    let mut ap = applier(&cfg, jpath.clone(), !a.yes, ctl.as_ref(), &mut log);
    let r = ap.apply(&actions, BatchKind::Undo, Some(batch.id))?;
    print_report(&r, a.common.json)?;
    match &r.error {
        Some(e) => Err(format!("undo failed: {e}").into()),
        None => Ok(()),
    }
}

fn daemon_cmd(a: &DaemonArgs) -> Result<(), Error> {
    let cfg = config(&a.common)?;
    let journal = journal_path(&a.common, &cfg);
    let interval = a.interval.unwrap_or_else(|| cfg.interval());
    place::daemon(&place::DaemonOptions {
        cfg,
        journal,
        interval,
        yes: a.yes,
        passes: a.passes,
    })
}

pub fn run(a: &PlaceArgs) -> Result<(), Error> {
    match &a.cmd {
        PlaceCmd::Plan(p) => {
            let cfg = config(&p.common)?;
            let host = observe(&cfg, p.interval, None)?;
            let state = journal::read(&journal_path(&p.common, &cfg))?;
            print_plan(
                &plan(
                    &host,
                    &cfg,
                    &history_from_journal(&state, &host),
                    journal::now(),
                ),
                p.common.json,
            )
        }
        PlaceCmd::Apply(x) => apply_cmd(x),
        PlaceCmd::Undo(x) => undo_cmd(x),
        PlaceCmd::Daemon(x) => daemon_cmd(x),
        PlaceCmd::MoveMemory(m) => {
            let cfg = config(&m.common)?;
            let r = memory::move_memory(
                std::path::Path::new("/"),
                m.pid,
                m.node,
                &limits(&cfg),
                !m.yes,
                &mut |line| eprintln!("{line}"),
            )?;
            crate::write_stdout(&if m.common.json {
                stealscope_output::json::render(&r)
            } else {
                format!(
                    "{} pid {}: {} MiB to node {} in {} step(s){}",
                    if m.yes {
                        "moved"
                    } else {
                        "would move (dry run)"
                    },
                    r.pid,
                    r.moved_bytes >> 20,
                    r.to_node,
                    r.steps,
                    r.stopped
                        .as_deref()
                        .map(|s| format!("; stopped: {s}"))
                        .unwrap_or_default()
                )
            })
        }
    }
}
