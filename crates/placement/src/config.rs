//! /etc/stealscope/place.toml: which VMs get dedicated cores, housekeeping
//! CPUs, intervals, thresholds. Unknown keys are errors (a typo must not
//! silently fall back to a default on a production host).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_PATH: &str = "/etc/stealscope/place.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
}

/// How shared VMs get CPU in proportion to their vCPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fairness {
    /// Every shared VM's process joins one cpu group (`shared_group`), so the
    /// scheduler weighs vCPU threads, not VMs. Fair between the vCPUs of VMs
    /// of unequal size on contended CPUs (the walk-through host, the
    /// talk's), but in the simulated fleet it moved idle steal from a few
    /// large VMs onto many small ones (BENCHMARKS.md, issue 27).
    SharedGroup,
    /// Each VM keeps its own group, weighted by its vCPU count (a VM in
    /// the root cpu group: its autogroup, by its nice).
    Weights,
    /// Each VM keeps its own group; weighted by its vCPU count only while
    /// its node's pool is overcommitted (see `diff::WEIGH_ABOVE`), back to
    /// the default weight when the pool has room again. Overcommitted, the
    /// steal is busy steal and groups of equal weight would give a 2-vCPU
    /// VM's vCPUs half of what a 1-vCPU VM's gets (the walk-through host);
    /// with room, the steal is the balancer's idle steal, and per-VM groups
    /// left alone kept the simulated fleet's VM steal tail lowest
    /// (BENCHMARKS.md, issue 27). The default.
    Auto,
    /// Leave CPU weights and groups alone (libvirt's per-VM groups kept):
    /// in the simulated fleet the VM steal tail is lower this way (VM steal
    /// p90 0.57 % against 1.30 %; BENCHMARKS.md, issue 27), but the
    /// walk-through host's vCPUs end 11.8 pp apart.
    None,
}

/// Where a shared VM's vCPU threads may run inside its node's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VcpuMapping {
    /// Pinned one per pool CPU, balanced by demand, while the pool is
    /// overcommitted (demand per pool CPU at or above `pin_above`; released
    /// below 90 % of it) by vCPUs that are busy or idle (none wanting
    /// between a quarter and three quarters of a CPU); the whole pool
    /// otherwise. For hosts of steadily spinning guests.
    Auto,
    /// Always the whole pool: the kernel's load balancer places threads.
    /// The default: in the simulated fleet (demand that changes) pinning
    /// cut no steal and doubled the placement changes (BENCHMARKS.md,
    /// issue 27).
    Pool,
    /// Always pinned one per pool CPU, balanced by demand.
    Pinned,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// VM name globs this daemon manages; empty: every VM. Others are left
    /// alone (and their CPU use is not planned around).
    pub manage: Vec<String>,
    /// VM name globs that get dedicated cores (SMT siblings kept together).
    pub dedicated: Vec<String>,
    /// CPUs reserved for emulator and I/O threads (kernel list format).
    pub housekeeping_cpus: String,
    pub fairness: Fairness,
    /// cpu group (relative to the cpu controller's mount) for `shared-group`.
    pub shared_group: String,
    /// Pool or pinned vCPU threads (see [`VcpuMapping`]).
    pub vcpu_mapping: VcpuMapping,
    /// Shared demand per pool CPU at which `auto` pins (1.0: every pool CPU
    /// would be busy anyway, so pinning costs no idle CPU).
    pub pin_above: f64,
    /// Seconds between daemon passes.
    pub interval_s: f64,
    /// Seconds between daemon passes once placement holds: the interval
    /// doubles after each pass with nothing to do, up to this, and the
    /// daemon only reads the host at the ends of such a pass (numad's
    /// `-i MIN:MAX` the same way). `interval_s` or less: no backing off.
    pub max_interval_s: f64,
    /// A VM is not moved to another node again within this many seconds.
    pub min_move_interval_s: f64,
    /// Another node must be this much better (fraction of a node's load) to move a VM.
    pub hysteresis: f64,
    /// Memory on other nodes below this is left where it is.
    pub migrate_min_mib: u64,
    /// Free memory a node must keep after a move: the larger of these two.
    pub mem_margin_pct: f64,
    pub mem_margin_min_mib: u64,
    /// Memory is moved in steps of this size, re-checking between steps.
    pub mem_step_mib: u64,
    /// Stop moving memory when /proc/pressure/memory "some avg10" exceeds this.
    pub psi_memory_stop: f64,
    /// Minimum free swap, as a share of the bytes to move, when swap is in use.
    pub swap_headroom: f64,
    /// Go on even when automatic NUMA balancing or numad would fight the plan.
    pub override_conflicts: bool,
    /// Offer only the largest part of a plan the simulator's prediction
    /// does not call worse than the current layout (leaving out the shared
    /// group, then affinity, then memory moves). Off: the whole plan, and
    /// `apply` refuses it when predicted worse unless --force.
    pub never_worse: bool,
    /// Where actions are journaled before they are applied.
    pub journal: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            manage: Vec::new(),
            dedicated: Vec::new(),
            housekeeping_cpus: String::new(),
            fairness: Fairness::Auto,
            shared_group: "/stealscope.shared".into(),
            vcpu_mapping: VcpuMapping::Pool,
            pin_above: 1.0,
            interval_s: 10.0,
            max_interval_s: 60.0,
            min_move_interval_s: 600.0,
            hysteresis: 0.1,
            migrate_min_mib: 64,
            mem_margin_pct: 5.0,
            mem_margin_min_mib: 256,
            mem_step_mib: 128,
            psi_memory_stop: 10.0,
            swap_headroom: 1.0,
            override_conflicts: false,
            never_worse: true,
            journal: "/var/lib/stealscope/place.journal".into(),
        }
    }
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |msg: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            msg,
        };
        let c: Config = toml::from_str(text).map_err(|e| invalid(toml_error(text, &e)))?;
        c.validate().map_err(invalid)?;
        Ok(c)
    }

    /// Reads `path`; a missing file at the default path means defaults.
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(t) => Config::parse(&t, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(Config::default())
            }
            Err(e) => Err(ConfigError::Io {
                path: path.to_path_buf(),
                source: e,
            }),
        }
    }

    /// Checks values serde cannot (ranges, globs, CPU lists); the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        let pos = |v: f64, name: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{name} must be a positive number, got {v}"))
            }
        };
        pos(self.interval_s, "interval_s")?;
        pos(self.max_interval_s, "max_interval_s")?;
        pos(self.pin_above, "pin_above")?;
        if !(self.min_move_interval_s.is_finite() && self.min_move_interval_s >= 0.0) {
            return Err("min_move_interval_s must be 0 or more".into());
        }
        if !(0.0..=10.0).contains(&self.hysteresis) {
            return Err(format!(
                "hysteresis must be within [0, 10], got {}",
                self.hysteresis
            ));
        }
        if !(0.0..50.0).contains(&self.mem_margin_pct) {
            return Err(format!(
                "mem_margin_pct must be within [0, 50), got {}",
                self.mem_margin_pct
            ));
        }
        if self.mem_step_mib == 0 {
            return Err("mem_step_mib must be at least 1".into());
        }
        pos(self.psi_memory_stop, "psi_memory_stop")?;
        if !(self.swap_headroom.is_finite() && self.swap_headroom >= 0.0) {
            return Err("swap_headroom must be 0 or more".into());
        }
        if !self.shared_group.starts_with('/') || self.shared_group.contains("..") {
            return Err(format!(
                "shared_group must be an absolute cgroup path without '..', got {:?}",
                self.shared_group
            ));
        }
        self.housekeeping()?;
        self.dedicated_matcher()?;
        globs(&self.manage, "manage")?;
        Ok(())
    }

    pub fn housekeeping(&self) -> Result<Vec<u32>, String> {
        if self.housekeeping_cpus.trim().is_empty() {
            return Ok(Vec::new());
        }
        stealscope_readers::cpulist::parse(&self.housekeeping_cpus, "housekeeping_cpus")
            .map_err(|e| format!("housekeeping_cpus: {e}"))
    }

    pub fn dedicated_matcher(&self) -> Result<globset::GlobSet, String> {
        globs(&self.dedicated, "dedicated")
    }

    /// Whether this VM is managed (an empty `manage` list manages all).
    pub fn manages(&self, name: &str) -> bool {
        self.manage.is_empty() || globs(&self.manage, "manage").is_ok_and(|g| g.is_match(name))
    }

    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(self.interval_s)
    }

    pub fn max_interval(&self) -> Duration {
        Duration::from_secs_f64(self.max_interval_s)
    }

    /// Free memory a node must keep after a move.
    pub fn mem_margin_bytes(&self, node_total: u64) -> u64 {
        let pct = (node_total as f64 * self.mem_margin_pct / 100.0) as u64;
        pct.max(self.mem_margin_min_mib << 20)
    }
}

/// One line: where (line and its text, which names the key) and what.
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count();
            let src = text.lines().nth(line).unwrap_or("").trim();
            format!("line {} (`{src}`): {}", line + 1, e.message().trim())
        }
        None => e.message().trim().to_string(),
    }
}

fn globs(list: &[String], key: &str) -> Result<globset::GlobSet, String> {
    let mut b = globset::GlobSetBuilder::new();
    for g in list {
        b.add(globset::Glob::new(g).map_err(|e| format!("{key}: {e}"))?);
    }
    b.build().map_err(|e| format!("{key}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Config, String> {
        Config::parse(t, Path::new("place.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(parse("").unwrap(), Config::default());
        let c =
            parse("dedicated = [\"db-*\"]\nhousekeeping_cpus = \"0,1\"\nfairness = \"weights\"\n")
                .unwrap();
        assert_eq!(c.housekeeping().unwrap(), vec![0, 1]);
        assert!(c.dedicated_matcher().unwrap().is_match("db-7"));
        assert_eq!(c.fairness, Fairness::Weights);
        let c = parse("vcpu_mapping = \"pool\"\npin_above = 1.5\n").unwrap();
        assert_eq!((c.vcpu_mapping, c.pin_above), (VcpuMapping::Pool, 1.5));
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        for (text, want) in [
            ("interval_s = 0", "interval_s must be a positive"),
            ("fairnes = \"weights\"", "unknown field `fairnes`"),
            ("housekeeping_cpus = \"3-1\"", "housekeeping_cpus"),
            ("dedicated = [\"[\"]", "dedicated"),
            ("mem_step_mib = 0", "mem_step_mib"),
            ("pin_above = -1", "pin_above must be a positive"),
            ("vcpu_mapping = \"pin\"", "unknown variant `pin`"),
            ("shared_group = \"x\"", "shared_group"),
            (
                "hysteresis = \"a\"",
                "line 1 (`hysteresis = \"a\"`): invalid type",
            ),
            ("[[[", "place.toml"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.starts_with("place.toml: "), "{e}");
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n') || e.lines().count() < 8, "{e}");
        }
    }
}
