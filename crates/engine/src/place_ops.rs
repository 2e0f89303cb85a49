//! `place plan|apply|undo|move-memory` as functions returning typed
//! results, so that the CLI only parses their arguments and prints what
//! they return. The order is part of the contract: with `--yes` a crash's
//! half-done actions are settled (recover) before anything is planned or
//! reversed, and a refused plan changes nothing.

use crate::place::{applier, history_from_journal, limits, observe, recover};
use std::path::{Path, PathBuf};
use std::time::Duration;
use stealscope_actuators::apply::{self, ApplyReport};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory::{self, MoveReport};
use stealscope_placement::config::DEFAULT_PATH;
use stealscope_placement::input::CpuController;
use stealscope_placement::{live, plan, Config, Plan};
use stealscope_readers::RootFs;

type Error = Box<dyn std::error::Error>;

/// The config and journal a `place` command runs with.
pub struct Setup {
    pub cfg: Config,
    pub journal: PathBuf,
}

impl Setup {
    /// Loads `config` (a missing default file means defaults, a missing
    /// file asked for by name is an error); `journal` overrides the
    /// config's.
    pub fn load(
        config: &Path,
        journal: Option<&Path>,
        override_conflicts: bool,
    ) -> Result<Setup, Error> {
        let explicit = config.as_os_str() != DEFAULT_PATH;
        let mut cfg = Config::load(config, explicit)?;
        cfg.override_conflicts |= override_conflicts;
        let journal = journal.map_or_else(|| PathBuf::from(&cfg.journal), Path::to_path_buf);
        Ok(Setup { cfg, journal })
    }
}

/// The placement now: demand observed over `interval`, history from the
/// journal.
pub fn plan_now(s: &Setup, interval: Duration) -> Result<Plan, Error> {
    let host = observe(&s.cfg, interval, None)?;
    let state = journal::read(&s.journal)?;
    Ok(plan(
        &host,
        &s.cfg,
        &history_from_journal(&state, &host),
        journal::now(),
    ))
}

/// A plan saved by `place plan --json`.
pub fn read_plan(f: &Path) -> Result<Plan, Error> {
    let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
    Ok(serde_json::from_str::<Plan>(&text)
        .map_err(|e| format!("{}: not a plan from `place plan --json` ({e})", f.display()))?)
}

/// What `place apply` did, or would do on a dry run.
pub struct Applied {
    pub plan: Plan,
    pub report: ApplyReport,
}

fn controller() -> Result<Option<CpuController>, Error> {
    Ok(live::cpu_controller(&RootFs::new(Path::new("/")))?)
}

fn log(l: &str) {
    eprintln!("stealscope place: {l}");
}

/// Applies `plan_file`, or the plan made now over `interval`; a dry run
/// unless `yes`. A refused plan is an error and changes nothing.
pub fn apply(
    s: &Setup,
    plan_file: Option<&Path>,
    interval: Duration,
    yes: bool,
) -> Result<Applied, Error> {
    let ctl = controller()?;
    if yes {
        recover(&s.journal, ctl.as_ref())?;
    }
    let p = match plan_file {
        Some(f) => read_plan(f)?,
        None => plan_now(s, interval)?,
    };
    if let Some(why) = &p.refused {
        return Err(format!("refused: {why}").into());
    }
    let mut l = log;
    let mut ap = applier(&s.cfg, s.journal.clone(), !yes, ctl.as_ref(), &mut l);
    let report = ap.apply(&p.actions, BatchKind::Apply, None)?;
    Ok(Applied { plan: p, report })
}

/// Reverses the last applied batch that is not undone yet; a dry run
/// unless `yes`.
pub fn undo(s: &Setup, yes: bool) -> Result<ApplyReport, Error> {
    let ctl = controller()?;
    if yes {
        recover(&s.journal, ctl.as_ref())?;
    }
    let state = journal::read(&s.journal)?;
    let Some(batch) = state.last_undoable() else {
        return Err(format!(
            "{}: nothing to undo (no applied batch that is not undone yet)",
            s.journal.display()
        )
        .into());
    };
    let (actions, notes) = apply::reverse(batch);
    for n in notes {
        log(&n);
    }
    let mut l = log;
    let mut ap = applier(&s.cfg, s.journal.clone(), !yes, ctl.as_ref(), &mut l);
    Ok(ap.apply(&actions, BatchKind::Undo, Some(batch.id))?)
}

/// Moves `pid`'s memory to `node` within the config's limits; a dry run
/// (checks only) unless `yes`. Each step is logged on stderr.
pub fn move_memory(s: &Setup, pid: u32, node: u32, yes: bool) -> Result<MoveReport, Error> {
    Ok(memory::move_memory(
        Path::new("/"),
        pid,
        node,
        &limits(&s.cfg),
        !yes,
        &mut |line| eprintln!("{line}"),
    )?)
}
