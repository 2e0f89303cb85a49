//! The hardware part of the doctor report: what CPUID says about the
//! hypervisor, per-CPU counter figures over the interval, and one line per
//! counter that could not be read saying why.

use serde::Serialize;
use stealscope_findings::units::round_opt;
use stealscope_model::hardware::HardwareModel;
use stealscope_model::hw::HwTotals;
use stealscope_model::MachineModel;
use stealscope_readers::cpuid::CpuidFacts;
use stealscope_readers::perf::{Counter, Missing, Reason, HARDWARE};

pub const CPUID_NOT_CAPTURED: &str =
    "CPUID not captured (snapshot from an older stealscope, or taken with --root)";
pub const COUNTERS_NOT_CAPTURED: &str =
    "hardware counters not captured (snapshot from an older stealscope, or taken with --root)";

/// Per-CPU counter figures over the whole interval (sums of the windows).
#[derive(Debug, Clone, Serialize)]
pub struct CpuCounters {
    pub cpu: u32,
    pub ipc: Option<f64>,
    pub cache_miss_rate: Option<f64>,
    /// Least share of a window the cycles group counted (< 1: multiplexed).
    pub min_running_share: Option<f64>,
    pub tsc_mhz: Option<f64>,
    pub avg_mhz: Option<f64>,
    pub busy_mhz: Option<f64>,
    pub busy_pct: Option<f64>,
    /// SMIs counted (MSR 0x34), None when not readable.
    pub smi: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MissingCounter {
    pub counter: &'static str,
    pub why: String,
    /// The reason in a few words, shared by counters missing for the same
    /// cause (the text report groups them on one line).
    #[serde(skip)]
    pub brief: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CountersSection {
    pub opened: Vec<&'static str>,
    pub missing: Vec<MissingCounter>,
    pub windows: usize,
    pub cpus: Vec<CpuCounters>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HardwareSection {
    /// Decoded CPUID; null when the snapshot did not capture it.
    pub cpuid: Option<CpuidFacts>,
    /// Null when the snapshot did not capture counters.
    pub counters: Option<CountersSection>,
}

fn mean(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let xs: Vec<f64> = v.flatten().filter(|x| x.is_finite()).collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

fn per_cpu(h: &HardwareModel) -> Vec<CpuCounters> {
    let mut cpus: Vec<u32> = h
        .windows()
        .iter()
        .flat_map(|w| w.cpus.iter().map(|c| c.cpu))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus.into_iter()
        .map(|cpu| {
            let ws: Vec<_> = h
                .windows()
                .iter()
                .flat_map(|w| w.cpus.iter().filter(move |c| c.cpu == cpu))
                .collect();
            let mut t = HwTotals::default();
            ws.iter().for_each(|w| t.add(w));
            let smi: Vec<u64> = ws.iter().filter_map(|w| w.smi).collect();
            CpuCounters {
                cpu,
                ipc: round_opt(t.ipc(), 3),
                cache_miss_rate: round_opt(t.miss_rate(), 4),
                min_running_share: round_opt(
                    ws.iter()
                        .filter_map(|w| w.hw_running_share)
                        .reduce(f64::min),
                    3,
                ),
                tsc_mhz: round_opt(mean(ws.iter().map(|w| w.tsc_mhz)), 1),
                avg_mhz: round_opt(mean(ws.iter().map(|w| w.avg_mhz)), 1),
                busy_mhz: round_opt(mean(ws.iter().map(|w| w.busy_mhz)), 1),
                busy_pct: round_opt(mean(ws.iter().map(|w| w.busy_pct)), 2),
                smi: (!smi.is_empty()).then(|| smi.iter().sum::<u64>()),
            }
        })
        .collect()
}

/// The kernel's boot line about the core PMU, when the log has it.
fn pmu_boot_line(m: &MachineModel) -> Option<&str> {
    m.t1.kmsg_lines_containing("Performance Events:").next()
}

fn errno_text(errno: i32, error: &str) -> String {
    match errno {
        2 => "ENOENT".to_string(),
        13 => "EACCES".to_string(),
        1 => "EPERM".to_string(),
        19 => "ENODEV".to_string(),
        95 => "EOPNOTSUPP".to_string(),
        _ => error.to_string(),
    }
}

/// CPUID evidence that the VM has no core PMU.
fn pmu_cpuid(c: Option<&CpuidFacts>) -> Option<String> {
    let c = c?;
    match c.vendor.as_deref() {
        Some("GenuineIntel") if c.arch_perfmon_version == Some(0) => {
            Some("CPUID.0AH:EAX reports no architectural PMU (version 0)".into())
        }
        Some("AuthenticAMD") | Some("HygonGenuine") if c.amd_perfctr_core == Some(false) => {
            Some("CPUID.80000001H:ECX[23] PerfCtrExtCore is clear".into())
        }
        _ => None,
    }
}

/// One line: which counter, that it is missing, and why.
pub fn why(m: &MachineModel, missing: &Missing) -> String {
    let cpuid = m.hardware.cpuid.as_ref();
    let on = if missing.cpus.is_empty() {
        String::new()
    } else {
        format!(
            " on CPU {}",
            stealscope_readers::cpulist::format(&missing.cpus)
        )
    };
    let hw = HARDWARE.contains(&missing.counter);
    let reason = match &missing.reason {
        Reason::Open { errno, error } if hw && matches!(errno, 2 | 19 | 95) => {
            let mut s = format!(
                "no hardware PMU in this VM (perf_event_open: {})",
                errno_text(*errno, error)
            );
            if let Some(line) = pmu_boot_line(m) {
                s.push_str(&format!("; kernel: \"{}\"", line.trim()));
            }
            if let Some(c) = pmu_cpuid(cpuid) {
                s.push_str(&format!("; {c}"));
            }
            s.push_str(
                "; the hypervisor does not virtualize the PMU (QEMU/libvirt: -cpu host,pmu=on / <pmu state='on'/>; \
                 Firecracker exposes none)",
            );
            s
        }
        Reason::Open { errno, error } if matches!(errno, 1 | 13) => format!(
            "perf_event_open: {}: run as root or with CAP_PERFMON, or lower /proc/sys/kernel/perf_event_paranoid",
            errno_text(*errno, error)
        ),
        Reason::Open { errno, error } => {
            format!("perf_event_open: {} ({error})", errno_text(*errno, error))
        }
        Reason::NoPmu { path } => format!(
            "no msr PMU ({path} absent: not x86, or a kernel without the x86 msr perf driver)"
        ),
        Reason::NotListed { path } => match missing.counter {
            Counter::Aperf | Counter::Mperf => {
                let mut s = format!("the msr PMU does not list it ({path} absent)");
                match cpuid.and_then(|c| c.aperfmperf) {
                    Some(false) => s.push_str(
                        ": CPUID.06H:ECX[0] (APERFMPERF) is clear, the hypervisor does not expose APERF/MPERF to this guest, so effective and busy MHz cannot be measured here",
                    ),
                    Some(true) => s.push_str(" although CPUID.06H:ECX[0] (APERFMPERF) is set: the kernel's probe read of the MSR failed"),
                    None => {}
                }
                s
            }
            Counter::Smi => {
                let mut s = format!("the msr PMU does not list it ({path} absent)");
                match cpuid.and_then(|c| c.vendor.as_deref()) {
                    Some(v) if v != "GenuineIntel" => s.push_str(&format!(
                        ": the kernel offers msr/smi/ only on Intel CPUs (arch/x86/events/msr.c test_intel); this CPU is {v}"
                    )),
                    Some(_) => s.push_str(
                        ": this Intel model is not in the kernel's list (arch/x86/events/msr.c test_intel) or MSR_SMI_COUNT is not readable in this guest",
                    ),
                    None => {}
                }
                s
            }
            _ => format!("the msr PMU does not list it ({path} absent)"),
        },
        Reason::BadSysfs { error } => format!("the msr PMU's description is unreadable: {error}"),
    };
    let device = missing
        .device
        .as_ref()
        .map(|d| {
            let hint = if d.contains("os error 2)") {
                ": the msr driver is not loaded (modprobe msr) or the kernel lacks CONFIG_X86_MSR"
            } else if d.contains("os error 5)") {
                ": rdmsr faulted, the CPU or hypervisor does not expose this MSR"
            } else if d.contains("os error 1)") || d.contains("os error 13)") {
                ": reading MSRs needs root with CAP_SYS_RAWIO"
            } else {
                ""
            };
            format!("; the msr device fallback failed too ({d}{hint})")
        })
        .unwrap_or_default();
    format!(
        "{} not available{on}: {reason}{device}",
        missing.counter.name()
    )
}

/// The reason a counter is missing in a few words (`why` has the evidence).
pub fn brief(m: &MachineModel, missing: &Missing) -> String {
    let cpuid = m.hardware.cpuid.as_ref();
    let hw = HARDWARE.contains(&missing.counter);
    let on = if missing.cpus.is_empty() {
        String::new()
    } else {
        format!(
            " (CPU {})",
            stealscope_readers::cpulist::format(&missing.cpus)
        )
    };
    let reason = match &missing.reason {
        Reason::Open { errno, error } if hw && matches!(errno, 2 | 19 | 95) => format!(
            "no PMU in this VM (perf_event_open: {})",
            errno_text(*errno, error)
        ),
        Reason::Open { errno, error } if matches!(errno, 1 | 13) => format!(
            "perf_event_open: {}: needs root or CAP_PERFMON",
            errno_text(*errno, error)
        ),
        Reason::Open { errno, error } => format!("perf_event_open: {}", errno_text(*errno, error)),
        Reason::NoPmu { .. } => "no msr PMU in this kernel".to_string(),
        Reason::NotListed { .. } => match (missing.counter, cpuid) {
            (Counter::Aperf | Counter::Mperf, Some(c)) if c.aperfmperf == Some(false) => {
                "not exposed by the hypervisor (CPUID.06H:ECX[0] clear)".to_string()
            }
            (Counter::Smi, Some(c)) if c.vendor.as_deref().is_some_and(|v| v != "GenuineIntel") => {
                "Intel only".to_string()
            }
            _ => "not offered by the msr PMU".to_string(),
        },
        Reason::BadSysfs { .. } => "the msr PMU's description is unreadable".to_string(),
    };
    format!("{reason}{on}")
}

pub fn section(m: &MachineModel) -> HardwareSection {
    let h = &m.hardware;
    HardwareSection {
        cpuid: h.cpuid.clone(),
        counters: h.counters.as_ref().map(|c| CountersSection {
            opened: c.opened.iter().map(|c| c.name()).collect(),
            missing: c
                .missing
                .iter()
                .map(|x| MissingCounter {
                    counter: x.counter.name(),
                    why: why(m, x),
                    brief: brief(m, x),
                })
                .collect(),
            windows: c.windows.len(),
            cpus: per_cpu(h),
        }),
    }
}

/// Notes: what was not captured, one line per missing counter.
pub fn notes(s: &HardwareSection) -> Vec<String> {
    let mut out = Vec::new();
    if s.cpuid.is_none() {
        out.push(CPUID_NOT_CAPTURED.to_string());
    } else if let Some(c) = &s.cpuid {
        if c.arch != "x86_64" {
            out.push(format!("CPUID: not x86 ({}): no hypervisor leaves", c.arch));
        }
    }
    match &s.counters {
        None => out.push(COUNTERS_NOT_CAPTURED.to_string()),
        Some(c) => out.extend(c.missing.iter().map(|m| m.why.clone())),
    }
    out
}
