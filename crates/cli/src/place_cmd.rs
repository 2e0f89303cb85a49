//! `stealscope place plan|apply|daemon|undo|move-memory`: the placement
//! daemon. Everything that changes the host is a dry run unless `--yes`.

use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stealscope_actuators::apply::{self, Applier, ApplyReport};
use stealscope_actuators::journal::{self, BatchKind};
use stealscope_actuators::memory::{self, MoveLimits};
use stealscope_model::host::collect_host;
use stealscope_model::observation::Side;
use stealscope_placement::history::{DemandHistory, VmHistory};
use stealscope_placement::input::CpuController;
use stealscope_placement::{live, plan, Config, History, HostInput, Plan};
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
    #[arg(long, default_value = "2s", value_parser = crate::args::parse_duration)]
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
    #[arg(long, value_parser = crate::args::parse_duration)]
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

pub fn limits(cfg: &Config) -> MoveLimits {
    MoveLimits {
        margin_pct: cfg.mem_margin_pct,
        margin_min_bytes: cfg.mem_margin_min_mib << 20,
        step_bytes: cfg.mem_step_mib << 20,
        psi_stop: cfg.psi_memory_stop,
        swap_headroom: cfg.swap_headroom,
    }
}

fn journal_path(c: &PlaceCommon, cfg: &Config) -> PathBuf {
    c.journal
        .clone()
        .unwrap_or_else(|| PathBuf::from(&cfg.journal))
}

/// The host observed over `interval`, as the planner's input, with the
/// config's shared group as it is now.
fn observe(
    cfg: &Config,
    interval: Duration,
    stop: Option<&AtomicBool>,
) -> Result<HostInput, Error> {
    let src = RootFs::new(Path::new("/"));
    // Timed from just before each side: collect_host reads the thread times
    // first, and the rest of a side can take seconds on a busy host.
    let start = Instant::now();
    let t0 = collect_host(&src, Side::Start)?;
    sleep_until(start + interval, stop);
    let end = Instant::now();
    let t1 = collect_host(&src, Side::End)?;
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
fn history_from_journal(state: &journal::JournalState, host: &HostInput) -> History {
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

fn print_plan(p: &Plan, json: bool) -> Result<(), Error> {
    crate::write_stdout(&if json {
        stealscope_output::json::render(p)
    } else {
        stealscope_output::place::plan(p)
    })
}

fn applier<'a>(
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

fn print_report(r: &ApplyReport, json: bool) -> Result<(), Error> {
    crate::write_stdout(&if json {
        stealscope_output::json::render(r)
    } else {
        stealscope_output::place::apply_report(r)
    })
}

fn recover(path: &Path, ctl: Option<&CpuController>) -> Result<(), Error> {
    for line in apply::recover(path, ctl)? {
        eprintln!("stealscope place: {line}");
    }
    Ok(())
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
    let jpath = journal_path(&a.common, &cfg);
    let interval = a.interval.unwrap_or_else(|| cfg.interval());
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
        let mut host = match observe(&cfg, interval, Some(&stop)) {
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
            recover(&jpath, host.cpu_controller.as_ref())?;
        }
        let h = match hist.take() {
            Some(h) => h,
            None => history_from_journal(&journal::read(&jpath)?, &host),
        };
        let mut h = h;
        h.retain(|pid| host.vms.iter().any(|v| v.pid == pid));
        let now = journal::now();
        let p = plan(&host, &cfg, &h, now);
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
                &cfg,
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
