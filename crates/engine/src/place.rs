//! The placement daemon's passes and what `place plan|apply|undo` share
//! with them: the host observed over an interval (the planner's input),
//! the planner's history from the journal, the applier with the config's
//! limits. Everything that changes the host is a dry run unless asked.

use crate::host::sched_hook::{vmm_running, SchedHook};
use crate::place_demand::{Recorder, STEP};
use crate::place_watch;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stealscope_actuators::apply::{self, Applier, ApplyReport};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory::MoveLimits;
use stealscope_model::host::collect_host;
use stealscope_model::observation::Side;
use stealscope_placement::history::VmHistory;
use stealscope_placement::input::CpuController;
use stealscope_placement::{live, Config, History, HostInput};
use stealscope_readers::RootFs;

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
    observe_paced(cfg, (interval, true), stop, rec, hook.as_mut())
}

/// [`observe_sampled`] with a collector already loaded (the daemon's,
/// kept from pass to pass: loading it is the BPF verifier's work, 0.4 s
/// of CPU a load, which every 5 s was 8 % of a CPU taken from the VMs).
/// Its readings are cumulative; attribution takes t1's minus t0's. With
/// `close` false (a quiet daemon pass) no thread is sampled in between
/// and `rec` pauses: the host is read at the ends only.
pub(crate) fn observe_paced(
    cfg: &Config,
    (interval, close): (Duration, bool),
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
    if close {
        rec.sample();
        rec.begin_window();
        sleep_sampling(start + interval, stop, rec);
    } else {
        rec.pause();
        sleep_until(start + interval, stop);
    }
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
        // Woken only to sample (a stop waits at most a step): each wake-up
        // may preempt a vCPU.
        std::thread::sleep(deadline.min(next).saturating_duration_since(Instant::now()));
    }
    rec.sample();
}

/// Sleeps until `deadline`, looking for a stop each second.
fn sleep_until(deadline: Instant, stop: Option<&AtomicBool>) {
    while Instant::now() < deadline && !stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(left.min(Duration::from_secs(1)));
    }
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
