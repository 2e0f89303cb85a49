//! `place plan|apply|undo|move-memory` as functions returning typed
//! results, so that the CLI only parses their arguments and prints what
//! they return. The order is part of the contract: with `--yes` a crash's
//! half-done actions are settled (recover) before anything is planned or
//! reversed, and a refused plan changes nothing.

use crate::place::{
    applier, guard, history_from_journal, limits, observe_sampled, read_journal, recover,
    undo_last, Undone,
};
use crate::place_demand::{self, Recorder};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use stealscope_actuators::apply::ApplyReport;
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory::{self, MoveReport};
use stealscope_placement::config::DEFAULT_PATH;
use stealscope_placement::input::CpuController;
use stealscope_placement::{live, plan, Config, HostInput, Plan};
use stealscope_readers::RootFs;
use stealscope_sim::predict::Prediction;

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

/// A plan with the simulator's prediction of it.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    #[serde(flatten)]
    pub plan: Plan,
    /// None: no VM to predict for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
}

/// `plan` with its prediction, trimmed unless `whole` (see
/// [`place_demand::chosen`]).
fn chosen(host: &HostInput, rec: &Recorder, plan: Plan, whole: bool) -> Planned {
    let (plan, prediction) = place_demand::chosen(host, rec, plan, whole);
    Planned { plan, prediction }
}

/// The placement now: demand observed over `interval`, history from the
/// journal (none, with a warning, when the journal is unreadable), and
/// what the simulator predicts it does.
pub fn plan_now(s: &Setup, interval: Duration) -> Result<Planned, Error> {
    let mut rec = Recorder::new();
    let host = observe_sampled(&s.cfg, interval, None, &mut rec)?;
    let (state, note) = read_journal(&s.journal)?;
    let mut p = plan(
        &host,
        &s.cfg,
        &history_from_journal(&state, &host),
        journal::now(),
    );
    p.warnings.extend(note);
    Ok(chosen(&host, &rec, p, !s.cfg.never_worse))
}

/// A plan saved by `place plan --json`.
pub fn read_plan(f: &Path) -> Result<Plan, Error> {
    let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
    Ok(serde_json::from_str::<Plan>(&text)
        .map_err(|e| format!("{}: not a plan from `place plan --json` ({e})", f.display()))?)
}

/// What `place apply` did, or would do on a dry run.
pub struct Applied {
    pub plan: Planned,
    pub report: ApplyReport,
    /// The watchdog undid the batch.
    pub undone: Option<Undone>,
}

fn controller() -> Result<Option<CpuController>, Error> {
    Ok(live::cpu_controller(&RootFs::new(Path::new("/")))?)
}

fn log(l: &str) {
    eprintln!("stealscope place: {l}");
}

/// How `place apply` runs.
#[derive(Debug, Clone)]
pub struct ApplyOptions<'a> {
    /// Apply this saved plan instead of planning now.
    pub plan_file: Option<&'a Path>,
    /// Demand is measured over it (for the plan and its prediction).
    pub interval: Duration,
    /// Really apply (else a dry run).
    pub yes: bool,
    /// Apply a plan the simulator predicts worse.
    pub force: bool,
    /// How long the watchdog watches after the batch (zero: not at all).
    pub watch: Duration,
}

/// Plans now (the largest part not predicted worse, unless `force`), or
/// reads `plan_file`, and predicts it, over `interval`.
fn planned(s: &Setup, o: &ApplyOptions) -> Result<(Planned, Recorder), Error> {
    let mut rec = Recorder::new();
    let host = observe_sampled(&s.cfg, o.interval, None, &mut rec)?;
    let p = match o.plan_file {
        Some(f) => return Ok((chosen(&host, &rec, read_plan(f)?, true), rec)),
        None => {
            let (state, note) = read_journal(&s.journal)?;
            let mut p = plan(
                &host,
                &s.cfg,
                &history_from_journal(&state, &host),
                journal::now(),
            );
            p.warnings.extend(note);
            p
        }
    };
    // --force takes the whole plan, predicted worse or not.
    let whole = o.force || !s.cfg.never_worse;
    Ok((chosen(&host, &rec, p, whole), rec))
}

/// Applies `plan_file`, or the plan made now; a dry run unless `yes`. A
/// refused plan, or (with `yes`) one the simulator predicts worse unless
/// `force`, is an error and changes nothing. After the batch the watchdog watches;
/// a task it finds starving undoes the batch.
pub fn apply(s: &Setup, o: &ApplyOptions) -> Result<Applied, Error> {
    let ctl = controller()?;
    if o.yes {
        recover(&s.journal, ctl.as_ref())?;
    }
    let (p, rec) = planned(s, o)?;
    if let Some(why) = &p.plan.refused {
        return Err(format!("refused: {why}").into());
    }
    // A dry run shows the plan with its prediction (which says it would be
    // refused); only a real apply refuses.
    if let (Some(why), true) = (
        p.prediction.as_ref().and_then(|x| x.refusal()),
        o.yes && !o.force,
    ) {
        return Err(format!("refused: {why}").into());
    }
    let mut l = log;
    let mut ap = applier(&s.cfg, s.journal.clone(), !o.yes, ctl.as_ref(), &mut l);
    let report = ap.apply(&p.plan.actions, BatchKind::Apply, None)?;
    let done = report.results.iter().any(|r| r.outcome == "done");
    let undone = match report.batch {
        Some(b) if done && report.error.is_none() => {
            guard(&s.cfg, &s.journal, ctl.as_ref(), b, &rec, o.watch, &mut l)
        }
        _ => None,
    };
    Ok(Applied {
        plan: p,
        report,
        undone,
    })
}

/// Reverses the last applied batch that is not undone yet; a dry run
/// unless `yes`.
pub fn undo(s: &Setup, yes: bool) -> Result<ApplyReport, Error> {
    let ctl = controller()?;
    if yes {
        recover(&s.journal, ctl.as_ref())?;
    }
    let mut l = log;
    undo_last(&s.cfg, &s.journal, ctl.as_ref(), !yes, &mut l)?.ok_or_else(|| {
        format!(
            "{}: nothing to undo (no applied batch that is not undone yet)",
            s.journal.display()
        )
        .into()
    })
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
