//! `place daemon`: plans and applies every interval, logging each
//! decision; passes with nothing to do back off (`place_cadence`).

use crate::host::sched_hook::{vmm_running, SchedHook};
use crate::place::{applier, guard, history_from_journal, observe_paced, read_journal, recover};
use crate::place_cadence::{Cadence, Outcome};
use crate::place_demand::{self, Recorder};
use crate::sched::LIVE_RETIRE;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_placement::history::DemandHistory;
use stealscope_placement::{plan, Action, Config, History, HostInput, Plan};
use stealscope_sim::predict::{self, Measures, Prediction};

type Error = Box<dyn std::error::Error>;

/// What `place daemon` runs with.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub cfg: Config,
    pub journal: PathBuf,
    /// Time between passes; demand is measured over it.
    pub interval: Duration,
    /// Really apply (else log what it would do).
    pub yes: bool,
    /// Stop after this many passes.
    pub passes: Option<u64>,
    /// Apply plans the simulator predicts worse.
    pub force: bool,
    /// How long the watchdog watches after each batch (zero: not at all).
    pub watch: Duration,
}

/// The daemon's state between passes.
struct Daemon<'a> {
    o: &'a DaemonOptions,
    rec: Recorder,
    hist: Option<History>,
    demand: DemandHistory,
    /// The last batch applied and the measures predicted for it, checked
    /// against what the next pass measures.
    pending: Option<(u64, Measures, Vec<u32>)>,
    /// The scheduler-event collector, loaded once and kept (see
    /// [`crate::place::observe_paced`]).
    hook: Option<SchedHook>,
    /// How long the next pass is, and whether it samples closely.
    cadence: Cadence,
    /// The kept collector watches nothing (since the first quiet pass).
    hook_idle: bool,
}

fn log(l: &str) {
    eprintln!("stealscope place daemon: {l}");
}

/// Plans and applies every interval until SIGTERM or Ctrl-C (between
/// passes) or the last pass, logging each decision on stderr.
pub fn daemon(o: &DaemonOptions) -> Result<(), Error> {
    let stop = stealscope_probes::signals::stop_on_signals()?;
    log(&format!(
        "start: every {:.1} s (up to {:.1} s while there is nothing to do), {}; journal {}",
        o.interval.as_secs_f64(),
        o.cfg.max_interval().max(o.interval).as_secs_f64(),
        if o.yes {
            "applying"
        } else {
            "dry run (add --yes to apply)"
        },
        o.journal.display()
    ));
    let mut d = Daemon {
        o,
        rec: Recorder::new(),
        hist: None,
        demand: DemandHistory::default(),
        pending: None,
        hook: None,
        cadence: Cadence::new(o.interval, o.cfg.max_interval()),
        hook_idle: false,
    };
    let mut pass = 0u64;
    while !stop.load(Ordering::Relaxed) && o.passes.is_none_or(|n| pass < n) {
        pass += 1;
        let (interval, close) = (d.cadence.interval(), d.cadence.close());
        let hook = pass_hook(&mut d.hook, &d.cadence, &mut d.hook_idle);
        let paced = (interval, close);
        let host = match observe_paced(&o.cfg, paced, Some(&stop), &mut d.rec, hook) {
            Ok(h) => h,
            Err(e) => {
                log(&format!("pass {pass}: cannot observe the host: {e}"));
                continue;
            }
        };
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let outcome = d.pass(pass, host, close)?;
        d.cadence.after(outcome);
        if d.cadence.interval() != interval {
            log(&format!("pass {pass}: {}", pace(&d.cadence)));
        }
    }
    log("stop");
    Ok(())
}

/// The next pass's pace, as logged when it changes.
fn pace(c: &Cadence) -> String {
    let s = c.interval().as_secs_f64();
    if c.close() {
        format!("next pass in {s:.1} s, sampling every thread each 0.5 s")
    } else {
        format!("nothing to do: next pass in {s:.1} s, reading the host at its ends only")
    }
}

/// The daemon's collector for this pass: loaded when a VMM runs and none
/// is running (the first pass, or after a route failed). A quiet pass
/// uses none, and the kept one watches nothing meanwhile (its programs
/// still run on every switch, but stop at the first map lookup). `idle`:
/// it already does (unwatching takes a reading: once is enough).
fn pass_hook<'a>(
    kept: &'a mut Option<SchedHook>,
    c: &Cadence,
    idle: &mut bool,
) -> Option<&'a mut SchedHook> {
    if !c.close() {
        if let (Some(h), false) = (kept.as_mut(), *idle) {
            h.watch(&[]);
            *idle = true;
        }
        return None;
    }
    *idle = false;
    if !vmm_running(Path::new("/")) {
        return None;
    }
    if !kept.as_ref().is_some_and(SchedHook::loaded) {
        let mut h = SchedHook::load();
        // Culprits quiet for a few passes leave the running totals, which
        // otherwise grow with every pair that ever met; each pass
        // differences readings at most the longest pass apart.
        h.retire_quiet(LIVE_RETIRE.max(4 * c.longest()));
        *kept = Some(h);
    }
    kept.as_mut()
}

impl Daemon<'_> {
    fn pass(&mut self, pass: u64, mut host: HostInput, close: bool) -> Result<Outcome, Error> {
        let (cfg, jpath) = (&self.o.cfg, &self.o.journal);
        if let Some((batch, predicted, vms)) = self.pending.take() {
            let m = place_demand::measured(&host, &self.rec, &vms);
            let named = place_demand::host_work_named(&host, &self.rec, 3);
            let whose = if named.is_empty() {
                String::new()
            } else {
                format!(", of it most: {}", named.join(", "))
            };
            log(&format!(
                "pass {pass}: batch {batch} measured: {}{whose}",
                predict::versus(&m, &predicted)
            ));
        }
        self.demand.smooth(&mut host);
        if self.o.yes && pass == 1 {
            recover(jpath, host.cpu_controller.as_ref())?;
        }
        let mut h = match self.hist.take() {
            Some(h) => h,
            None => {
                // A dry run only reads: an unreadable journal (not root)
                // plans without its history, and says so.
                let (state, note) = if self.o.yes {
                    (journal::read(jpath)?, None)
                } else {
                    read_journal(jpath)?
                };
                if let Some(n) = note {
                    log(&format!("pass {pass}: {n}"));
                }
                history_from_journal(&state, &host)
            }
        };
        h.retain(|pid| host.vms.iter().any(|v| v.pid == pid));
        let now = journal::now();
        let p = plan(&host, cfg, &h, now);
        let (applied, outcome) = if close || p.refused.is_some() {
            self.decide(pass, &host, &p)
        } else {
            (Vec::new(), self.glance(pass, &p))
        };
        p.record_in(&mut h, &applied, now);
        self.hist = Some(h);
        Ok(outcome)
    }

    /// A quiet pass's plan: too coarsely measured to predict, so a change
    /// worth having is looked at closely at the next pass.
    fn glance(&self, pass: u64, p: &Plan) -> Outcome {
        if self.cadence.worth_a_look(&p.actions, Instant::now()) {
            log(&format!(
                "pass {pass}: {} VM(s), {} change(s) wanted: looking closely before deciding",
                p.vms.len(),
                p.actions.len()
            ));
            return Outcome::Wanted;
        }
        let what = if p.actions.is_empty() {
            "placement holds, nothing to do"
        } else {
            "the plan is the change refused lately"
        };
        log(&format!("pass {pass}: {} VM(s), {what}", p.vms.len()));
        Outcome::Held
    }

    /// Logs the plan and its prediction; applies it when allowed. Returns
    /// the actions applied, and what the pass came to.
    fn decide(&mut self, pass: u64, host: &HostInput, whole: &Plan) -> (Vec<Action>, Outcome) {
        let held = (Vec::new(), Outcome::Held);
        // Predicted only when there is something to apply.
        let (p, pred) = if whole.actions.is_empty() || whole.refused.is_some() {
            (whole.clone(), None)
        } else {
            let all = self.o.force || !self.o.cfg.never_worse;
            place_demand::chosen(host, &self.rec, whole.clone(), all)
        };
        if p.actions != whole.actions {
            // Part of it predicted worse: not worth a close look again soon.
            self.cadence.refused(&whole.actions, Instant::now());
        }
        let p = &p;
        for w in &p.warnings {
            log(&format!("pass {pass}: warning: {w}"));
        }
        if let Some(why) = &p.refused {
            log(&format!("pass {pass}: refused: {why}"));
            return held;
        }
        if p.actions.is_empty() {
            log(&format!(
                "pass {pass}: {} VM(s), placement holds, nothing to do",
                p.vms.len()
            ));
            return held;
        }
        let pred = pred.unwrap_or_else(|| place_demand::predict(host, &self.rec, p));
        log(&format!("pass {pass}: predicted: {}", pred.summary()));
        if let (Some(why), false) = (pred.refusal(), self.o.force) {
            log(&format!("pass {pass}: refused: {why}"));
            self.cadence.refused(&p.actions, Instant::now());
            return held;
        }
        for act in &p.actions {
            log(&format!(
                "pass {pass}: {}: {act} ({})",
                if self.o.yes { "decide" } else { "would" },
                act.reason()
            ));
        }
        if !self.o.yes {
            // A dry run keeps its pace: it says what it would do each pass.
            return (Vec::new(), Outcome::Wanted);
        }
        if self.apply(pass, host, p, &pred) {
            return (p.actions.clone(), Outcome::Applied);
        }
        held
    }

    /// Applies `p` and watches the batch; true when it was applied without
    /// an error.
    fn apply(&mut self, pass: u64, host: &HostInput, p: &Plan, pred: &Prediction) -> bool {
        let (cfg, jpath) = (&self.o.cfg, &self.o.journal);
        let ctl = host.cpu_controller.as_ref();
        let mut l = |x: &str| log(x);
        let r = match applier(cfg, jpath.clone(), false, ctl, &mut l).apply(
            &p.actions,
            BatchKind::Apply,
            None,
        ) {
            Ok(r) => r,
            Err(e) => {
                log(&format!("pass {pass}: not applied: {e}"));
                self.cadence.refused(&p.actions, Instant::now());
                return false;
            }
        };
        let n = |o: &str| r.results.iter().filter(|x| x.outcome == o).count();
        let batch = r.batch.unwrap_or(0);
        log(&format!(
            "pass {pass}: batch {batch}: {} done, {} gone, {} failed{}",
            n("done"),
            n("gone"),
            n("failed"),
            r.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
        if n("done") == 0 || r.error.is_some() {
            self.cadence.refused(&p.actions, Instant::now());
            return false;
        }
        let mut l = |x: &str| log(&format!("pass {pass}: {x}"));
        if guard(cfg, jpath, ctl, batch, &self.rec, self.o.watch, &mut l).is_none() {
            self.pending = Some((batch, pred.planned, pred.vms.clone()));
            return true;
        }
        // The guard undid the batch: nothing of it holds, and the same
        // batch is not worth a close look again soon.
        self.cadence.refused(&p.actions, Instant::now());
        false
    }
}
