//! The placement daemon's passes and what `place plan|apply|undo` share
//! with them: the host observed over an interval (the planner's input),
//! the planner's history from the journal, the applier with the config's
//! limits. Everything that changes the host is a dry run unless asked.

use crate::host::sched_hook::{vmm_running, SchedHook};
use crate::place_demand::{self, Recorder, STEP};
use crate::place_watch;
use crate::sched::LIVE_RETIRE;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stealscope_actuators::apply::{self, Applier, ApplyReport};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory::MoveLimits;
use stealscope_model::host::collect_host;
use stealscope_model::observation::Side;
use stealscope_placement::history::{DemandHistory, VmHistory};
use stealscope_placement::input::CpuController;
use stealscope_placement::{live, plan, Action, Config, History, HostInput, Plan};
use stealscope_readers::RootFs;
use stealscope_sim::predict::{self, Measures, Prediction};

type Error = Box<dyn std::error::Error>;

pub fn limits(cfg: &Config) -> MoveLimits {
    MoveLimits {
        margin_pct: cfg.mem_margin_pct,
        margin_min_bytes: cfg.mem_margin_min_mib << 20,
        step_bytes: cfg.mem_step_mib << 20,
        psi_stop: cfg.psi_memory_stop,
        swap_headroom: cfg.swap_headroom,
    }
}

/// The host observed over `interval`, as the planner's input, with the
/// config's shared group as it is now.
pub fn observe(
    cfg: &Config,
    interval: Duration,
    stop: Option<&AtomicBool>,
) -> Result<HostInput, Error> {
    observe_sampled(cfg, interval, stop, &mut Recorder::new())
}

/// [`observe`], with every thread sampled into `rec` meanwhile (its
/// window is this interval).
pub fn observe_sampled(
    cfg: &Config,
    interval: Duration,
    stop: Option<&AtomicBool>,
    rec: &mut Recorder,
) -> Result<HostInput, Error> {
    // Who stole the VMs' time, as evidence in the plan's reasons (root
    // only; without it the plan is the same and cites nothing). Loaded
    // before t0, so that its start-up is outside the interval.
    let mut hook = vmm_running(Path::new("/")).then(SchedHook::load);
    observe_with(cfg, interval, stop, rec, hook.as_mut())
}

/// [`observe_sampled`] with a collector already loaded (the daemon's,
/// kept from pass to pass: loading it is the BPF verifier's work, 0.4 s
/// of CPU a load, which every 5 s was 8 % of a CPU taken from the VMs).
/// Its readings are cumulative; attribution takes t1's minus t0's.
fn observe_with(
    cfg: &Config,
    interval: Duration,
    stop: Option<&AtomicBool>,
    rec: &mut Recorder,
    mut hook: Option<&mut SchedHook>,
) -> Result<HostInput, Error> {
    let src = RootFs::new(Path::new("/"));
    // Timed from just before each side: collect_host reads the thread times
    // first, and the rest of a side can take seconds on a busy host.
    let start = Instant::now();
    let mut t0 = collect_host(&src, Side::Start)?;
    if t0.vms.is_empty() {
        hook = None;
    }
    if let Some(h) = hook.as_mut() {
        t0.sched = Some(h.watch(&t0.vms));
    }
    rec.sample();
    rec.begin_window();
    sleep_sampling(start + interval, stop, rec);
    let end = Instant::now();
    let last = hook.map(SchedHook::read);
    let mut t1 = collect_host(&src, Side::End)?;
    t1.sched = last;
    let mut host = live::host_input(&src, &t0, &t1, (end - start).as_secs_f64())?;
    host.shared_group_weight = host
        .cpu_controller
        .as_ref()
        .and_then(|c| live::group_weight(&src, &c.group(&cfg.shared_group)));
    Ok(host)
}

/// Sleeps until `deadline` (or a stop), sampling every thread each [`STEP`]
/// and once at the end.
fn sleep_sampling(deadline: Instant, stop: Option<&AtomicBool>, rec: &mut Recorder) {
    let mut next = Instant::now() + STEP;
    while Instant::now() < deadline {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            break;
        }
        if Instant::now() >= next {
            rec.sample();
            next += STEP;
        }
        let wake = deadline.min(next);
        std::thread::sleep(
            wake.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100)),
        );
    }
    rec.sample();
}

/// The journal as far as it can be read: an unreadable journal (not
/// root) gives no history and a note saying so, for commands that only
/// read; a damaged one is an error.
pub fn read_journal(path: &Path) -> Result<(journal::JournalState, Option<String>), Error> {
    match journal::read(path) {
        Ok(s) => Ok((s, None)),
        Err(stealscope_actuators::ApplyError::Denied { .. }) => Ok((
            journal::JournalState::default(),
            Some(format!(
                "cannot read the journal {} (permission denied): planned without its history \
                 (when each VM last changed)",
                path.display()
            )),
        )),
        Err(e) => Err(e.into()),
    }
}

/// Planner history after a restart: the journal says when each VM last
/// changed; the live host says where it is.
pub fn history_from_journal(state: &journal::JournalState, host: &HostInput) -> History {
    let mut h = History::default();
    let node_of = host.topology.node_of_cpus();
    for (pid, t) in state.last_change() {
        let Some(vm) = host.vms.iter().find(|v| v.pid == pid) else {
            continue;
        };
        let node = vm.cpus_node(&node_of);
        h.vms.insert(
            pid,
            VmHistory {
                node,
                changed_at_s: t,
            },
        );
    }
    h
}

pub fn applier<'a>(
    cfg: &Config,
    journal: PathBuf,
    dry_run: bool,
    ctl: Option<&'a CpuController>,
    log: &'a mut dyn FnMut(&str),
) -> Applier<'a> {
    Applier {
        journal,
        dry_run,
        ctl,
        limits: limits(cfg),
        log,
    }
}

pub fn recover(path: &Path, ctl: Option<&CpuController>) -> Result<(), Error> {
    for line in apply::recover(path, ctl)? {
        eprintln!("stealscope place: {line}");
    }
    Ok(())
}

/// Reverses the last applied batch that is not undone yet (a dry run when
/// `dry_run`); None when there is none.
pub fn undo_last(
    cfg: &Config,
    jpath: &Path,
    ctl: Option<&CpuController>,
    dry_run: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Option<ApplyReport>, Error> {
    let state = journal::read(jpath).map_err(|e| -> Error {
        match e {
            stealscope_actuators::ApplyError::Denied { .. } => format!(
                "{}: permission denied: undo restores what the journal recorded, so even its dry \
                 run must read it (run as root, or pass --journal)",
                jpath.display()
            )
            .into(),
            e => e.into(),
        }
    })?;
    let Some(batch) = state.last_undoable() else {
        return Ok(None);
    };
    let (actions, notes) = apply::reverse(batch);
    for n in notes {
        log(&n);
    }
    let mut ap = applier(cfg, jpath.to_path_buf(), dry_run, ctl, log);
    Ok(Some(ap.apply(&actions, BatchKind::Undo, Some(batch.id))?))
}

/// What the watchdog found after a batch, and what it did.
#[derive(Debug, Clone)]
pub struct Undone {
    pub batch: u64,
    pub why: String,
    /// The undo batch's report (None: the undo itself failed, `why` says so).
    pub report: Option<ApplyReport>,
}

/// Watches for `span` after `batch` was applied; a task starving then
/// (runnable for 4 s with under 2 % of a CPU) undoes the batch. Tasks
/// already starving over `rec`'s last window are not the batch's doing.
pub fn guard(
    cfg: &Config,
    jpath: &Path,
    ctl: Option<&CpuController>,
    batch: u64,
    rec: &Recorder,
    span: Duration,
    log: &mut dyn FnMut(&str),
) -> Option<Undone> {
    if span.is_zero() {
        return None;
    }
    let before = rec
        .window_ends()
        .map(|(a, b)| place_watch::stalled_between(a, b))
        .unwrap_or_default();
    let starved = place_watch::watch(span, &before);
    if starved.is_empty() {
        return None;
    }
    let who: Vec<String> = starved.iter().map(ToString::to_string).collect();
    let why = format!(
        "watchdog: after batch {batch}, {}: undoing batch {batch}",
        who.join("; ")
    );
    log(&why);
    let report = match undo_last(cfg, jpath, ctl, false, log) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("{why}; the undo failed: {e}");
            log(&why);
            return Some(Undone {
                batch,
                why,
                report: None,
            });
        }
    };
    Some(Undone { batch, why, report })
}

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
    /// [`observe_with`]).
    hook: Option<SchedHook>,
}

fn log(l: &str) {
    eprintln!("stealscope place daemon: {l}");
}

/// Plans and applies every interval until SIGTERM or Ctrl-C (between
/// passes) or the last pass, logging each decision on stderr.
pub fn daemon(o: &DaemonOptions) -> Result<(), Error> {
    let stop = stealscope_probes::signals::stop_on_signals()?;
    log(&format!(
        "start: every {:.1} s, {}; journal {}",
        o.interval.as_secs_f64(),
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
    };
    let mut pass = 0u64;
    while !stop.load(Ordering::Relaxed) && o.passes.is_none_or(|n| pass < n) {
        pass += 1;
        let hook = kept_hook(&mut d.hook, o.interval);
        let host = match observe_with(&o.cfg, o.interval, Some(&stop), &mut d.rec, hook) {
            Ok(h) => h,
            Err(e) => {
                log(&format!("pass {pass}: cannot observe the host: {e}"));
                continue;
            }
        };
        if stop.load(Ordering::Relaxed) {
            break;
        }
        d.pass(pass, host)?;
    }
    log("stop");
    Ok(())
}

/// The daemon's collector for this pass: loaded when a VMM runs and none
/// is running (the first pass, or after a route failed).
fn kept_hook(kept: &mut Option<SchedHook>, interval: Duration) -> Option<&mut SchedHook> {
    if !vmm_running(Path::new("/")) {
        return None;
    }
    if !kept.as_ref().is_some_and(SchedHook::loaded) {
        let mut h = SchedHook::load();
        // Culprits quiet for a few passes leave the running totals, which
        // otherwise grow with every pair that ever met; each pass
        // differences readings one interval apart.
        h.retire_quiet(LIVE_RETIRE.max(4 * interval));
        *kept = Some(h);
    }
    kept.as_mut()
}

impl Daemon<'_> {
    fn pass(&mut self, pass: u64, mut host: HostInput) -> Result<(), Error> {
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
        let applied = self.decide(pass, &host, &p);
        p.record_in(&mut h, &applied, now);
        self.hist = Some(h);
        Ok(())
    }

    /// Logs the plan and its prediction; applies it when allowed. Returns
    /// the actions applied.
    fn decide(&mut self, pass: u64, host: &HostInput, p: &Plan) -> Vec<Action> {
        // Predicted only when there is something to apply.
        let (p, pred) = if p.actions.is_empty() || p.refused.is_some() {
            (p.clone(), None)
        } else {
            let whole = self.o.force || !self.o.cfg.never_worse;
            place_demand::chosen(host, &self.rec, p.clone(), whole)
        };
        let p = &p;
        for w in &p.warnings {
            log(&format!("pass {pass}: warning: {w}"));
        }
        if let Some(why) = &p.refused {
            log(&format!("pass {pass}: refused: {why}"));
            return Vec::new();
        }
        if p.actions.is_empty() {
            log(&format!(
                "pass {pass}: {} VM(s), placement holds, nothing to do",
                p.vms.len()
            ));
            return Vec::new();
        }
        let pred = pred.unwrap_or_else(|| place_demand::predict(host, &self.rec, p));
        log(&format!("pass {pass}: predicted: {}", pred.summary()));
        if let (Some(why), false) = (pred.refusal(), self.o.force) {
            log(&format!("pass {pass}: refused: {why}"));
            return Vec::new();
        }
        for act in &p.actions {
            log(&format!(
                "pass {pass}: {}: {act} ({})",
                if self.o.yes { "decide" } else { "would" },
                act.reason()
            ));
        }
        if self.o.yes && self.apply(pass, host, p, &pred) {
            return p.actions.clone();
        }
        Vec::new()
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
            return false;
        }
        let mut l = |x: &str| log(&format!("pass {pass}: {x}"));
        if guard(cfg, jpath, ctl, batch, &self.rec, self.o.watch, &mut l).is_none() {
            self.pending = Some((batch, pred.planned, pred.vms.clone()));
            return true;
        }
        // The guard undid the batch: nothing of it holds.
        false
    }
}
