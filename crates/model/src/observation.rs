//! Everything the guest rules need, read once from one side of an interval
//! (live machine, or t0/t1 of a snapshot). /proc/stat is required; every
//! other file is optional, and an optional file that cannot be parsed is
//! skipped with a note naming it rather than failing the report.

use serde::Serialize;
use std::collections::BTreeMap;
use stealscope_readers as r;
use stealscope_readers::{ReadError, Source};

#[derive(Debug, Clone, Default, Serialize)]
pub struct Observation {
    pub stat: r::stat::ProcStat,
    pub uptime_s: Option<f64>,
    pub interrupts: Option<r::interrupts::Interrupts>,
    pub cpuinfo: Option<r::cpuinfo::CpuInfo>,
    pub cpus: r::cpu_topology::CpuSets,
    pub cpuidle: r::cpuidle::CpuidleGlobal,
    pub idle_states: Vec<r::cpuidle::CpuIdleStates>,
    pub haltpoll: r::haltpoll::HaltpollParams,
    pub clocksource: r::clocksource::Clocksource,
    pub vulnerabilities: Option<BTreeMap<String, String>>,
    pub cpufreq: Vec<r::cpufreq::CpuFreq>,
    pub blocks: Vec<r::block::BlockQueue>,
    pub dirty: r::vm_dirty::DirtySettings,
    pub pressure_cpu: Option<r::psi::Pressure>,
    pub kmsg: Option<Vec<r::kmsg::KmsgRecord>>,
    pub osrelease: Option<String>,
    pub cmdline: Option<Vec<String>>,
    pub memory: Option<r::kernel::Memory>,
    pub pm_qos_us: Option<i32>,
    /// kvm_intel ept / kvm_amd npt, when the module is loaded.
    pub kvm_params: r::kvm_params::KvmParams,
    /// VMs found on this machine (empty on a plain guest) and host facts.
    pub host: crate::host::HostObservation,
    /// Exact guest steal over the interval, when the capture ran the
    /// collector (t1 only; [`crate::exact_steal`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_steal: Option<crate::exact_steal::StoredExactSteal>,
    /// Optional files that were present but unreadable, with the reason.
    pub notes: Vec<String>,
}

impl Observation {
    /// CPUs to read per-CPU files for: the online list, else the stat rows.
    pub fn cpu_ids(&self) -> Vec<u32> {
        match &self.cpus.online {
            Some(v) if !v.is_empty() => v.clone(),
            _ => self.stat.cpus.iter().filter_map(|r| r.cpu).collect(),
        }
    }

    pub fn cmdline_has(&self, param: &str) -> Option<&str> {
        debug_assert!(
            r::kernel::RULE_PARAMS.contains(&param),
            "{param}: add it to kernel::RULE_PARAMS (a redacted snapshot keeps only those)"
        );
        self.cmdline.as_ref()?.iter().find_map(|p| {
            if p == param {
                Some("")
            } else {
                p.strip_prefix(param)
                    .and_then(|rest| rest.strip_prefix('='))
            }
        })
    }

    pub fn kmsg_lines_containing<'a>(
        &'a self,
        needle: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        debug_assert!(
            r::kmsg::read_by_rules(needle),
            "{needle}: add it to kmsg::RULE_MARKERS (a snapshot keeps only those messages)"
        );
        self.kmsg
            .iter()
            .flatten()
            .map(|r| r.message.as_str())
            .filter(move |m| m.contains(needle))
    }
}

fn optional<T: Default>(notes: &mut Vec<String>, res: Result<T, ReadError>) -> T {
    res.unwrap_or_else(|e| {
        notes.push(format!("skipped {e}"));
        T::default()
    })
}

pub use crate::side::Side;

/// Reads one side. Fails only when /proc/stat is missing or unparsable.
pub fn collect(src: &dyn Source, side: Side) -> Result<Observation, ReadError> {
    // stat and uptime first and back to back: they time the interval.
    let stat =
        r::stat::read(src)?.ok_or_else(|| ReadError::parse(r::stat::PATH, "missing (required)"))?;
    let mut notes = Vec::new();
    let n = &mut notes;
    let uptime_s = optional(n, r::kernel::uptime(src));
    // VMs' thread times next, before any file that can wait for a VM
    // (host::thread_times says why).
    let thread_times = crate::host::thread_times(src);
    let interrupts = optional(n, r::interrupts::read(src));
    let cpuinfo = optional(n, r::cpuinfo::read(src));
    let cpus = optional(n, r::cpu_topology::read(src));
    let mut obs = Observation {
        stat,
        uptime_s,
        interrupts,
        cpuinfo,
        cpus,
        ..Default::default()
    };
    obs.cpuidle = optional(n, r::cpuidle::read_global(src));
    for cpu in obs.cpu_ids() {
        match r::cpuidle::read_cpu(src, cpu) {
            Ok(s) if !s.states.is_empty() => obs.idle_states.push(s),
            Ok(_) => {}
            Err(e) => n.push(format!("skipped {e}")),
        }
        match r::cpufreq::read_cpu(src, cpu) {
            Ok(Some(f)) => obs.cpufreq.push(f),
            Ok(None) => {}
            Err(e) => n.push(format!("skipped {e}")),
        }
    }
    obs.haltpoll = optional(n, r::haltpoll::read(src));
    obs.clocksource = optional(n, r::clocksource::read(src));
    obs.vulnerabilities = optional(n, r::vulnerabilities::read(src));
    obs.blocks = optional(n, r::block::read(src));
    obs.dirty = optional(n, r::vm_dirty::read(src));
    obs.pressure_cpu = optional(n, r::psi::read(src, r::psi::CPU_PATH));
    obs.kmsg = optional(n, r::kmsg::read(src));
    obs.osrelease = optional(n, r::kernel::osrelease(src));
    obs.cmdline = optional(n, r::kernel::cmdline(src));
    obs.memory = optional(n, r::kernel::meminfo(src));
    obs.pm_qos_us = optional(n, r::kernel::pm_qos_cpu_latency_us(src));
    obs.kvm_params = optional(n, r::kvm_params::read(src));
    obs.host = optional(
        n,
        thread_times.and_then(|t| crate::host::collect_host_with(src, side, t)),
    );
    obs.exact_steal =
        crate::host::observation::read_json(src, crate::exact_steal::EXACT_STEAL_FILE, &mut notes);
    obs.notes = notes;
    Ok(obs)
}
