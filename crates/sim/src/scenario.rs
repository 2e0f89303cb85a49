//! Scenario files (TOML): the host, its VMs and their demand, the cgroup
//! layout, the scheduler and NUMA cost model, the cases to compare and an
//! optional fleet. Unknown keys are errors, and every error names the file,
//! the line and the key (values are checked while they are read, so the
//! TOML parser can point at them).

use crate::demand::{BackgroundThread, Demand};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use toml::Spanned;

mod resolve;

pub use crate::values::{Count, Fraction, NonNeg, Positive, Weight};
pub use resolve::{Case, Scenario, VmDef};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
}

/// How VMs' vCPU threads are grouped for the cpu controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cgroups {
    /// One group per VM, default weight 1024 each (libvirt's default).
    PerVm,
    /// One group per VM, weight 1024 x vCPUs.
    Proportional,
    /// Every VM in one group (the talk's per-host group).
    PerHost,
    /// No cpu groups: every vCPU thread at the top level.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Nothing is pinned or regrouped: the kernel alone.
    None,
    /// numad's rule: each VM bound to one node, biggest first.
    Numad,
    /// stealscope's planner (the code of `place`), every `interval_s`.
    Stealscope,
}

impl PolicyKind {
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::None => "none",
            PolicyKind::Numad => "numad",
            PolicyKind::Stealscope => "stealscope",
        }
    }
}

fn d_nodes() -> Count {
    Count(1)
}
fn d_mem_node() -> Positive {
    Positive(64.0)
}
fn d_cgroups() -> Cgroups {
    Cgroups::PerVm
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// CPUs in all, split evenly over the nodes.
    pub cpus: Count,
    #[serde(default = "d_nodes")]
    pub nodes: Count,
    /// CPUs come in SMT pairs (the planner keeps siblings together).
    #[serde(default)]
    pub smt: bool,
    #[serde(default = "d_mem_node")]
    pub mem_gib_per_node: Positive,
    /// kernel.numa_balancing (only matters with more than one node).
    #[serde(default)]
    pub numa_balancing: bool,
    #[serde(default = "d_cgroups")]
    pub cgroups: Cgroups,
    /// Other work on the host, outside the VMs' groups.
    #[serde(default)]
    pub background: Vec<Background>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Background {
    /// Pinned to this CPU (default: any CPU, moved by the load balancer).
    pub cpu: Option<Spanned<u32>>,
    /// What it wants (as a VM's demand: "busy", a share, a pattern).
    #[serde(default)]
    pub demand: Option<Demand>,
    /// Or a thread on a timer (a kernel thread such as rcu_preempt or
    /// kdamond): it wakes this many times a second and runs `run_us` each
    /// time. With `[scheduler] timing` it then waits for the running
    /// entity's turn to end, so it is runnable, and load at the top level,
    /// far more than it runs.
    pub wakeups_per_s: Option<Positive>,
    pub run_us: Option<Positive>,
    /// Share of the time it sits on its CPU's run queue, running or not
    /// (schedstat run + wait over a window, as measured): the load it puts
    /// at the top level, whatever the model would give it. A kernel thread
    /// that runs microseconds a second can be queued most of the time
    /// beside busy groups (scenarios/calibration/vcpu-threads.md).
    pub queued: Option<Fraction>,
    /// Identical threads of this kind.
    #[serde(default = "d_count")]
    pub count: Count,
}

impl Background {
    /// One of these threads, as the model takes it.
    pub fn thread(&self, base: &Path) -> Result<BackgroundThread, String> {
        let (demand, wakeups_per_s) = self.demand_and_wakeups(base)?;
        if let Some(q) = self.queued {
            if demand.mean() > q.0 + 1e-12 {
                return Err(format!(
                    "queued = {} is less than what it runs ({:.3}): a thread is queued while it runs",
                    q.0,
                    demand.mean()
                ));
            }
        }
        Ok(BackgroundThread {
            cpu: self.cpu.as_ref().map(|c| *c.get_ref() as usize),
            demand,
            wakeups_per_s,
            queued: self.queued.map_or(0.0, |q| q.0),
        })
    }

    fn demand_and_wakeups(&self, base: &Path) -> Result<(Demand, f64), String> {
        match (&self.demand, self.wakeups_per_s, self.run_us) {
            (Some(d), None, None) => Ok((d.resolve(base)?, 0.0)),
            (None, Some(w), Some(r)) => {
                let level = w.0 * r.0 / 1e6;
                if level > 1.0 {
                    return Err(format!(
                        "wakeups_per_s x run_us is {level:.2} CPUs: one thread uses at most one"
                    ));
                }
                Ok((Demand::Level(level), w.0))
            }
            (Some(_), _, _) => {
                Err("give either demand or wakeups_per_s and run_us, not both".into())
            }
            (None, None, _) => Err("needs demand, or wakeups_per_s and run_us".into()),
            (None, Some(_), None) => Err("wakeups_per_s needs run_us".into()),
        }
    }
}

fn d_imb() -> Positive {
    Positive(117.0)
}
fn d_true() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedSpec {
    /// The load balancer's imbalance_pct (kernel default 117 for cache
    /// domains): the busiest CPU must be this many percent above the local one.
    #[serde(default = "d_imb")]
    pub imbalance_pct: Positive,
    /// Periodic load balancing on (off: threads stay where they started).
    #[serde(default = "d_true")]
    pub balance: bool,
    /// Where new threads start: "idlest" (the kernel's fork placement, ties
    /// broken at random) or "random".
    #[serde(default)]
    pub start: StartPlacement,
    /// The kernel's timing details (`timing`): balance intervals that double
    /// while balanced, cache-hot refusals, wake-up placement of threads that
    /// sleep, wake-up latency and the queued state the group weights see.
    /// Stochastic (per seed); meant for ticks of 10 ms or less. Off: the
    /// coarse fluid model (fleets at 100 ms).
    #[serde(default)]
    pub timing: bool,
    /// The host kernel's CONFIG_HZ: its tick ends a running thread's turn.
    #[serde(default = "d_hz")]
    pub hz: Positive,
}

fn d_hz() -> Positive {
    Positive(250.0)
}

impl Default for SchedSpec {
    fn default() -> Self {
        SchedSpec {
            imbalance_pct: d_imb(),
            balance: true,
            start: StartPlacement::Idlest,
            timing: false,
            hz: d_hz(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartPlacement {
    #[default]
    Idlest,
    Random,
}

fn d_remote() -> Fraction {
    Fraction(0.3)
}
fn d_scan_period() -> Positive {
    Positive(1.0)
}
fn d_scan_mib() -> Positive {
    Positive(256.0)
}
fn d_fault_ms() -> NonNeg {
    NonNeg(100.0)
}
fn d_mig_rate() -> Positive {
    Positive(128.0)
}
fn d_mig_ms() -> NonNeg {
    NonNeg(500.0)
}

/// The NUMA cost model. The defaults are order-of-magnitude assumptions
/// (documented in scenarios/README.md), not measurements.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaSpec {
    /// Throughput lost by a vCPU whose memory is all remote (fraction).
    #[serde(default = "d_remote")]
    pub remote_penalty: Fraction,
    /// Automatic NUMA balancing: seconds between scans of a misplaced VM.
    #[serde(default = "d_scan_period")]
    pub scan_period_s: Positive,
    /// MiB of the VM's memory scanned per scan.
    #[serde(default = "d_scan_mib")]
    pub scan_mib: Positive,
    /// CPU time of the hinting faults per GiB scanned, ms.
    #[serde(default = "d_fault_ms")]
    pub fault_ms_per_gib: NonNeg,
    /// Page migration rate limit, MiB/s per VM.
    #[serde(default = "d_mig_rate")]
    pub migrate_mib_per_s: Positive,
    /// CPU time (migration threads) per GiB moved, ms.
    #[serde(default = "d_mig_ms")]
    pub migrate_ms_per_gib: NonNeg,
}

impl Default for NumaSpec {
    fn default() -> Self {
        NumaSpec {
            remote_penalty: d_remote(),
            scan_period_s: d_scan_period(),
            scan_mib: d_scan_mib(),
            fault_ms_per_gib: d_fault_ms(),
            migrate_mib_per_s: d_mig_rate(),
            migrate_ms_per_gib: d_mig_ms(),
        }
    }
}

/// Where a VM's memory starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemNode {
    /// Spread evenly over the nodes (the default without a policy).
    Spread,
    Node(u32),
}

impl<'de> Deserialize<'de> for MemNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MemNode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a node number or \"spread\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemNode, E> {
                u32::try_from(v)
                    .map(MemNode::Node)
                    .map_err(|_| E::custom(format!("node {v} is not a node number")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemNode, E> {
                if v == "spread" {
                    Ok(MemNode::Spread)
                } else {
                    Err(E::custom(format!(
                        "{v:?}: expected a node number or \"spread\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

fn d_count() -> Count {
    Count(1)
}
fn d_mem() -> Positive {
    Positive(2.0)
}
fn d_spread() -> MemNode {
    MemNode::Spread
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    pub name: Spanned<String>,
    /// This many VMs (named NAME-1, NAME-2, ... when more than one).
    #[serde(default = "d_count")]
    pub count: Count,
    pub vcpus: Count,
    #[serde(default = "d_mem")]
    pub mem_gib: Positive,
    #[serde(default = "d_spread")]
    pub mem_node: MemNode,
    #[serde(default)]
    pub demand: Demand,
    /// Initial affinity of its vCPU threads (kernel list format; default all).
    pub cpus: Option<Spanned<String>>,
    /// Explicit weight of its own cpu group (overrides the layout's).
    pub weight: Option<Weight>,
    /// For the stealscope policy: give it dedicated cores.
    #[serde(default)]
    pub dedicated: bool,
    /// Starts this many seconds into the run.
    #[serde(default)]
    pub start_s: NonNeg,
    /// Exits this many seconds into the run.
    pub stop_s: Option<Positive>,
    /// QEMU's main-loop thread, in the VM's cpu group beside its vCPUs.
    pub emulator: Option<EmulatorSpec>,
    /// How often each vCPU thread sleeps (blocks on QEMU's lock or an exit)
    /// and is woken by another thread of its VM (wake-up placement).
    #[serde(default)]
    pub vcpu_wakeups_per_s: NonNeg,
}

/// QEMU's main loop: short runs at each wake-up (timers, a vCPU's kick).
/// Little CPU, but runnable while it waits for the CPU after each wake-up,
/// which is load in its VM's group wherever it sits.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatorSpec {
    pub wakeups_per_s: Positive,
    /// CPU time per wake-up.
    pub run_us: Positive,
    /// Share of its wake-ups made by one of its vCPUs (the rest are its own
    /// timers): wake-up placement may move it to that vCPU's CPU.
    #[serde(default)]
    pub kicks: Fraction,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    pub name: Spanned<String>,
    #[serde(default = "d_policy")]
    pub policy: PolicyKind,
    /// Overrides [host] cgroups.
    pub cgroups: Option<Cgroups>,
    /// Overrides [host] numa_balancing.
    pub numa_balancing: Option<bool>,
    /// For policy = "stealscope": the place.toml keys (defaults otherwise).
    pub planner: Option<Spanned<toml::Table>>,
}

fn d_policy() -> PolicyKind {
    PolicyKind::None
}

fn d_arrivals() -> NonNeg {
    NonNeg(1.0)
}
fn d_lifetime() -> Positive {
    Positive(4.0)
}

/// Many hosts like [host], each filled with VMs drawn from `mix`, with VMs
/// arriving (Poisson) and leaving (exponential lifetimes).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    pub hosts: Count,
    /// VMs on each host at the start.
    pub initial_vms: Count,
    #[serde(default = "d_arrivals")]
    pub arrivals_per_host_hour: NonNeg,
    #[serde(default = "d_lifetime")]
    pub mean_lifetime_h: Positive,
    /// A host admits a new VM only while its vCPUs stay within this many per CPU.
    #[serde(default = "d_overcommit")]
    pub max_vcpus_per_cpu: Positive,
    pub mix: Vec<MixSpec>,
}

fn d_overcommit() -> Positive {
    Positive(2.0)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    pub vcpus: Count,
    /// Relative frequency of this kind.
    #[serde(default = "d_share")]
    pub share: Positive,
    #[serde(default = "d_mem")]
    pub mem_gib: Positive,
    #[serde(default)]
    pub demand: Demand,
}

fn d_share() -> Positive {
    Positive(1.0)
}

fn d_duration() -> Positive {
    Positive(60.0)
}
fn d_tick() -> Positive {
    Positive(100.0)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub description: Option<String>,
    #[serde(default = "d_duration")]
    pub duration_s: Positive,
    /// Resolution of the simulation.
    #[serde(default = "d_tick")]
    pub tick_ms: Positive,
    /// Left out of the statistics (the kernel settling).
    #[serde(default)]
    pub warmup_s: NonNeg,
    /// Seeds to run by default (repeated runs).
    #[serde(default = "d_count")]
    pub seeds: Count,
    pub host: HostSpec,
    #[serde(default)]
    pub scheduler: SchedSpec,
    #[serde(default)]
    pub numa: NumaSpec,
    #[serde(default, rename = "vm")]
    pub vms: Vec<VmSpec>,
    #[serde(default, rename = "case")]
    pub cases: Vec<CaseSpec>,
    pub fleet: Option<FleetSpec>,
}
