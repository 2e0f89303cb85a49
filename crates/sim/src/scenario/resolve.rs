//! A scenario file checked as a whole and resolved into what the engine
//! runs: VMs expanded by `count` and their demand read, cases with their
//! planner settings (or the three default policies).

use super::{Cgroups, EmulatorSpec, MemNode, PolicyKind, ScenarioError, ScenarioFile};
use crate::demand::Demand;
use std::path::{Path, PathBuf};
use stealscope_placement::config::toml_error;
use stealscope_placement::Config;

/// A case, resolved: what to run and how.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub policy: PolicyKind,
    pub cgroups: Cgroups,
    pub numa_balancing: bool,
    pub planner: Config,
}

/// A VM, resolved.
#[derive(Debug, Clone)]
pub struct VmDef {
    pub name: String,
    pub vcpus: u32,
    pub mem_gib: f64,
    pub mem_node: MemNode,
    pub demand: Demand,
    /// None: all CPUs.
    pub cpus: Option<Vec<u32>>,
    pub weight: Option<u64>,
    pub dedicated: bool,
    pub start_s: f64,
    pub stop_s: Option<f64>,
    pub emulator: Option<EmulatorSpec>,
    pub vcpu_wakeups_per_s: f64,
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub path: PathBuf,
    pub file: ScenarioFile,
    pub vms: Vec<VmDef>,
    pub cases: Vec<Case>,
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Io {
            path: path.to_path_buf(),
            source: e,
        })?;
        Scenario::parse(&text, path)
    }

    /// Parses `text`; trace files are found relative to `path`'s directory.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let w = Where { text, path };
        let file: ScenarioFile =
            toml::from_str(text).map_err(|e| w.invalid(toml_error(text, &e)))?;
        let base = path.parent().unwrap_or(Path::new("."));
        check_host(&file, &w, base)?;
        check_run(&file, &w)?;
        let vms = vm_defs(&file, &w, base)?;
        if vms.is_empty() && file.fleet.is_none() {
            return Err(w.invalid("no [[vm]] and no [fleet]: nothing to simulate".into()));
        }
        check_fleet(&file, &w, base)?;
        let cases = cases(&file, &w)?;
        Ok(Scenario {
            path: path.to_path_buf(),
            file,
            vms,
            cases,
        })
    }

    pub fn name(&self) -> String {
        self.path
            .file_stem()
            .map_or("scenario".into(), |s| s.to_string_lossy().into_owned())
    }
}

/// Where a scenario's text came from: errors name the file, and the line
/// with its text when serde kept the key's span.
struct Where<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Where<'_> {
    fn invalid(&self, msg: String) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.path.to_path_buf(),
            msg,
        }
    }

    fn at(&self, span: std::ops::Range<usize>, msg: String) -> ScenarioError {
        let line = self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count();
        let src = self.text.lines().nth(line).unwrap_or("").trim();
        self.invalid(format!("line {} (`{src}`): {msg}", line + 1))
    }
}

/// The host: CPUs split evenly over nodes (in SMT pairs when asked),
/// within the limit, background threads on its CPUs.
fn check_host(file: &ScenarioFile, w: &Where, base: &Path) -> Result<(), ScenarioError> {
    let host = &file.host;
    if !host.cpus.0.is_multiple_of(host.nodes.0) {
        return Err(w.invalid(format!(
            "host: cpus = {} does not split evenly over nodes = {}",
            host.cpus.0, host.nodes.0
        )));
    }
    if host.smt && !(host.cpus.0 / host.nodes.0).is_multiple_of(2) {
        return Err(w.invalid(format!(
            "host: smt = true needs an even number of CPUs per node, got {}",
            host.cpus.0 / host.nodes.0
        )));
    }
    if host.cpus.0 > 1024 {
        return Err(w.invalid(format!(
            "host: cpus = {} is above the simulator's limit of 1024",
            host.cpus.0
        )));
    }
    for cpu in host.background.iter().filter_map(|b| b.cpu.as_ref()) {
        if *cpu.get_ref() >= host.cpus.0 {
            return Err(w.at(
                cpu.span(),
                format!(
                    "background cpu {} is not one of the host's CPUs 0-{}",
                    cpu.get_ref(),
                    host.cpus.0 - 1
                ),
            ));
        }
    }
    for (i, b) in host.background.iter().enumerate() {
        b.thread(base)
            .map_err(|e| w.invalid(format!("host.background[{i}]: {e}")))?;
    }
    Ok(())
}

/// Warm-up, tick and the balancer's threshold.
fn check_run(file: &ScenarioFile, w: &Where) -> Result<(), ScenarioError> {
    if file.warmup_s.0 >= file.duration_s.0 {
        return Err(w.invalid(format!(
            "warmup_s = {} leaves nothing of duration_s = {}",
            file.warmup_s.0, file.duration_s.0
        )));
    }
    if file.tick_ms.0 < 1.0 || file.tick_ms.0 > 10_000.0 {
        return Err(w.invalid(format!(
            "tick_ms must be within [1, 10000], got {}",
            file.tick_ms.0
        )));
    }
    if file.scheduler.imbalance_pct.0 < 100.0 {
        return Err(w.invalid(format!(
            "scheduler: imbalance_pct must be at least 100, got {}",
            file.scheduler.imbalance_pct.0
        )));
    }
    Ok(())
}

/// The VMs, each `count` times, with their checks.
fn vm_defs(file: &ScenarioFile, w: &Where, base: &Path) -> Result<Vec<VmDef>, ScenarioError> {
    let host = &file.host;
    let mut vms = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for v in &file.vms {
        let name = v.name.get_ref().trim().to_string();
        let bad = |msg: String| w.at(v.name.span(), format!("vm `{name}`: {msg}"));
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad("name must be one word".into()));
        }
        let cpus = match &v.cpus {
            None => None,
            Some(s) => {
                let list = stealscope_readers::cpulist::parse(s.get_ref(), "cpus")
                    .map_err(|e| w.at(s.span(), format!("vm `{name}`: cpus: {e}")))?;
                if list.is_empty() || list.iter().any(|c| *c >= host.cpus.0) {
                    return Err(w.at(
                        s.span(),
                        format!(
                            "vm `{name}`: cpus {:?} must name some of the host's CPUs 0-{}",
                            s.get_ref(),
                            host.cpus.0 - 1
                        ),
                    ));
                }
                Some(list)
            }
        };
        if let MemNode::Node(n) = v.mem_node {
            if n >= host.nodes.0 {
                return Err(bad(format!(
                    "mem_node = {n} but the host has nodes 0-{}",
                    host.nodes.0 - 1
                )));
            }
        }
        if let Some(stop) = v.stop_s {
            if stop.0 <= v.start_s.0 {
                return Err(bad(format!(
                    "stop_s = {} is not after start_s = {}",
                    stop.0, v.start_s.0
                )));
            }
        }
        let demand = v
            .demand
            .resolve(base)
            .map_err(|e| bad(format!("demand: {e}")))?;
        if let Some(e) = v.emulator {
            let busy = e.wakeups_per_s.0 * e.run_us.0 / 1e6;
            if busy >= 1.0 {
                return Err(bad(format!(
                    "emulator: wakeups_per_s x run_us is {busy:.2} of a CPU, must be below 1"
                )));
            }
        }
        for i in 1..=v.count.0 {
            let full = if v.count.0 == 1 {
                name.clone()
            } else {
                format!("{name}-{i}")
            };
            if !names.insert(full.clone()) {
                return Err(bad(format!("two VMs are named `{full}`")));
            }
            vms.push(VmDef {
                name: full,
                vcpus: v.vcpus.0,
                mem_gib: v.mem_gib.0,
                mem_node: v.mem_node,
                demand: demand.clone(),
                cpus: cpus.clone(),
                weight: v.weight.map(|w| w.0),
                dedicated: v.dedicated,
                start_s: v.start_s.0,
                stop_s: v.stop_s.map(|s| s.0),
                emulator: v.emulator,
                vcpu_wakeups_per_s: v.vcpu_wakeups_per_s.0,
            });
        }
    }
    Ok(vms)
}

/// The fleet's mix, its demand resolvable.
fn check_fleet(file: &ScenarioFile, w: &Where, base: &Path) -> Result<(), ScenarioError> {
    if let Some(f) = &file.fleet {
        if f.mix.is_empty() {
            return Err(w.invalid("fleet: mix needs at least one [[fleet.mix]]".into()));
        }
        for (i, m) in f.mix.iter().enumerate() {
            m.demand
                .resolve(base)
                .map_err(|e| w.invalid(format!("fleet.mix[{i}]: demand: {e}")))?;
        }
    }
    Ok(())
}

/// The cases (each policy with its planner settings), or the three
/// policies when the file names none.
fn cases(file: &ScenarioFile, w: &Where) -> Result<Vec<Case>, ScenarioError> {
    let host = &file.host;
    let mut cases = Vec::new();
    let mut case_names = std::collections::BTreeSet::new();
    for c in &file.cases {
        let name = c.name.get_ref().clone();
        if !case_names.insert(name.clone()) {
            return Err(w.at(c.name.span(), format!("two cases are named `{name}`")));
        }
        let planner = match &c.planner {
            None => Config::default(),
            Some(t) => {
                if c.policy != PolicyKind::Stealscope {
                    return Err(w.at(
                        t.span(),
                        format!("case `{name}`: planner settings need policy = \"stealscope\""),
                    ));
                }
                let cfg: Config =
                    t.get_ref()
                        .clone()
                        .try_into()
                        .map_err(|e: toml::de::Error| {
                            w.at(
                                t.span(),
                                format!("case `{name}`: planner: {}", e.message().trim()),
                            )
                        })?;
                cfg.validate()
                    .map_err(|e| w.at(t.span(), format!("case `{name}`: planner: {e}")))?;
                cfg
            }
        };
        cases.push(Case {
            name,
            policy: c.policy,
            cgroups: c.cgroups.unwrap_or(host.cgroups),
            numa_balancing: c.numa_balancing.unwrap_or(host.numa_balancing),
            planner,
        });
    }
    if cases.is_empty() {
        for p in [PolicyKind::None, PolicyKind::Numad, PolicyKind::Stealscope] {
            cases.push(Case {
                name: p.name().into(),
                policy: p,
                cgroups: host.cgroups,
                numa_balancing: host.numa_balancing,
                planner: Config::default(),
            });
        }
    }
    Ok(cases)
}
