//! The placement daemon's passes and what `place plan|apply|undo` share
//! with them: the host observed over an interval (the planner's input),
//! the planner's history from the journal, the applier with the config's
//! limits. Everything that changes the host is a dry run unless asked.

use crate::host::sched_hook::{vmm_running, SchedHook};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stealscope_actuators::apply::{self, Applier};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory::MoveLimits;
use stealscope_model::host::collect_host;
use stealscope_model::observation::Side;
use stealscope_placement::history::{DemandHistory, VmHistory};
use stealscope_placement::input::CpuController;
use stealscope_placement::{live, plan, Config, History, HostInput};
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
    let src = RootFs::new(Path::new("/"));
    // Timed from just before each side: collect_host reads the thread times
    // first, and the rest of a side can take seconds on a busy host.
    // Who stole the VMs' time, as evidence in the plan's reasons (root
    // only; without it the plan is the same and cites nothing). Loaded
    // before t0, so that its start-up is outside the interval.
    let mut hook = vmm_running(Path::new("/")).then(SchedHook::load);
    let start = Instant::now();
    let mut t0 = collect_host(&src, Side::Start)?;
    if t0.vms.is_empty() {
        hook = None;
    }
    if let Some(h) = hook.as_mut() {
        t0.sched = Some(h.watch(&t0.vms));
    }
    sleep_until(start + interval, stop);
    let end = Instant::now();
    let last = hook.as_mut().map(SchedHook::read);
    let mut t1 = collect_host(&src, Side::End)?;
    t1.sched = last;
    let mut host = live::host_input(&src, &t0, &t1, (end - start).as_secs_f64())?;
    host.shared_group_weight = host
        .cpu_controller
        .as_ref()
        .and_then(|c| live::group_weight(&src, &c.group(&cfg.shared_group)));
    Ok(host)
}

fn sleep_until(deadline: Instant, stop: Option<&AtomicBool>) {
    while Instant::now() < deadline {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return;
        }
        std::thread::sleep((deadline - Instant::now()).min(Duration::from_millis(100)));
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
}

/// Plans and applies every interval until SIGTERM or Ctrl-C (between
/// passes) or the last pass, logging each decision on stderr.
pub fn daemon(o: &DaemonOptions) -> Result<(), Error> {
    let (cfg, jpath, interval, a) = (&o.cfg, &o.journal, o.interval, o);
    let stop = stealscope_probes::signals::stop_on_signals()?;
    let log = |l: &str| eprintln!("stealscope place daemon: {l}");
    log(&format!(
        "start: every {:.1} s, {}; journal {}",
        interval.as_secs_f64(),
        if a.yes {
            "applying"
        } else {
            "dry run (add --yes to apply)"
        },
        jpath.display()
    ));
    let mut hist: Option<History> = None;
    let mut demand = DemandHistory::default();
    let mut pass = 0u64;
    while !stop.load(Ordering::Relaxed) && a.passes.is_none_or(|n| pass < n) {
        pass += 1;
        let mut host = match observe(cfg, interval, Some(&stop)) {
            Ok(h) => h,
            Err(e) => {
                log(&format!("pass {pass}: cannot observe the host: {e}"));
                continue;
            }
        };
        if stop.load(Ordering::Relaxed) {
            break;
        }
        demand.smooth(&mut host);
        if a.yes && pass == 1 {
            recover(jpath, host.cpu_controller.as_ref())?;
        }
        let h = match hist.take() {
            Some(h) => h,
            None => history_from_journal(&journal::read(jpath)?, &host),
        };
        let mut h = h;
        h.retain(|pid| host.vms.iter().any(|v| v.pid == pid));
        let now = journal::now();
        let p = plan(&host, cfg, &h, now);
        for w in &p.warnings {
            log(&format!("pass {pass}: warning: {w}"));
        }
        if let Some(why) = &p.refused {
            log(&format!("pass {pass}: refused: {why}"));
            hist = Some(h);
            continue;
        }
        if p.actions.is_empty() {
            log(&format!(
                "pass {pass}: {} VM(s), placement holds, nothing to do",
                p.vms.len()
            ));
        }
        for act in &p.actions {
            log(&format!(
                "pass {pass}: {}: {act} ({})",
                if a.yes { "decide" } else { "would" },
                act.reason()
            ));
        }
        if a.yes && !p.actions.is_empty() {
            let mut l = |x: &str| log(x);
            let mut ap = applier(
                cfg,
                jpath.clone(),
                false,
                host.cpu_controller.as_ref(),
                &mut l,
            );
            match ap.apply(&p.actions, BatchKind::Apply, None) {
                Ok(r) => {
                    let n = |o: &str| r.results.iter().filter(|x| x.outcome == o).count();
                    log(&format!(
                        "pass {pass}: batch {}: {} done, {} gone, {} failed{}",
                        r.batch.unwrap_or(0),
                        n("done"),
                        n("gone"),
                        n("failed"),
                        r.error
                            .as_deref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    ));
                }
                Err(e) => log(&format!("pass {pass}: not applied: {e}")),
            }
        }
        for v in &p.vms {
            h.record(v.pid, v.node, now);
        }
        hist = Some(h);
    }
    log("stop");
    Ok(())
}
