//! Per-CPU hardware counters through perf_event_open: cycles, instructions,
//! cache references and misses as one group per CPU (read together so their
//! ratios come from the same span of time), and the `msr` PMU's tsc, aperf,
//! mperf and smi (arch/x86/events/msr.c) as a second group. Each read keeps
//! time_enabled/time_running so the model can scale multiplexed counts.
//!
//! The PMU list and the msr PMU's type and events are read through a
//! [`Source`] (sysfs); the opens are live syscalls. A counter that cannot be
//! opened is kept with the reason ([`Missing`]), never dropped silently.

use crate::clock::monotonic_ns;
pub mod msr_dev;

use crate::Source;
use msr_dev::{DeviceFailure, MsrDevices};
use perf_event::events::{Event, Hardware};
use perf_event::{Builder, Counter as PerfCounter, ReadFormat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

pub const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";
pub const MSR_PMU: &str = "/sys/bus/event_source/devices/msr";

/// The counters stealscope reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Counter {
    Cycles,
    Instructions,
    CacheReferences,
    CacheMisses,
    Tsc,
    Aperf,
    Mperf,
    Smi,
}

pub const HARDWARE: [Counter; 4] = [
    Counter::Cycles,
    Counter::Instructions,
    Counter::CacheReferences,
    Counter::CacheMisses,
];
pub const MSR: [Counter; 4] = [Counter::Tsc, Counter::Aperf, Counter::Mperf, Counter::Smi];

impl Counter {
    /// perf's name (`perf stat -e cycles`, `msr/aperf/`).
    pub fn name(self) -> &'static str {
        match self {
            Counter::Cycles => "cycles",
            Counter::Instructions => "instructions",
            Counter::CacheReferences => "cache-references",
            Counter::CacheMisses => "cache-misses",
            Counter::Tsc => "msr/tsc/",
            Counter::Aperf => "msr/aperf/",
            Counter::Mperf => "msr/mperf/",
            Counter::Smi => "msr/smi/",
        }
    }

    fn hardware(self) -> Option<Hardware> {
        match self {
            Counter::Cycles => Some(Hardware::CPU_CYCLES),
            Counter::Instructions => Some(Hardware::INSTRUCTIONS),
            Counter::CacheReferences => Some(Hardware::CACHE_REFERENCES),
            Counter::CacheMisses => Some(Hardware::CACHE_MISSES),
            _ => None,
        }
    }

    /// File name under the msr PMU's events/ directory.
    fn msr_event(self) -> Option<&'static str> {
        match self {
            Counter::Tsc => Some("tsc"),
            Counter::Aperf => Some("aperf"),
            Counter::Mperf => Some("mperf"),
            Counter::Smi => Some("smi"),
            _ => None,
        }
    }
}

/// Why a counter is not available. Kept structured so the report can add
/// what else the machine says (CPUID, kernel log) to the one-line reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// perf_event_open failed; errno and its text.
    Open { errno: i32, error: String },
    /// The PMU directory does not exist (e.g. no msr PMU on this kernel/arch).
    NoPmu { path: String },
    /// The PMU exists but does not list this event (the kernel probed the CPU
    /// and found it unsupported).
    NotListed { path: String },
    /// The PMU's sysfs description could not be read or parsed.
    BadSysfs { error: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    pub counter: Counter,
    pub reason: Reason,
    /// CPUs it is missing on; empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
    /// For msr counters: why the /dev/cpu/N/msr fallback did not work
    /// either ("/dev/cpu/0/msr: No such file or directory (os error 2)").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// One read of one group on one CPU: cumulative counts since the open and the
/// group's cumulative enabled/running time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRead {
    pub enabled_ns: u64,
    pub running_ns: u64,
    pub counts: BTreeMap<Counter, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuRead {
    pub cpu: u32,
    pub groups: Vec<GroupRead>,
}

impl CpuRead {
    /// The count of `c` and the times of the group it was read in.
    pub fn get(&self, c: Counter) -> Option<(u64, &GroupRead)> {
        self.groups
            .iter()
            .find_map(|g| g.counts.get(&c).map(|v| (*v, g)))
    }
}

/// All CPUs read at one moment (CLOCK_MONOTONIC, same clock as samples.jsonl).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSample {
    pub t_ns: u64,
    pub cpus: Vec<CpuRead>,
}

/// Everything a capture learnt about counters (`counters.json` in a snapshot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CounterCapture {
    /// Counters opened on at least one CPU.
    pub opened: Vec<Counter>,
    pub missing: Vec<Missing>,
    pub samples: Vec<CounterSample>,
}

/// The msr PMU as sysfs describes it: its type and the config of each event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsrPmu {
    pub type_: u32,
    pub events: BTreeMap<String, u64>,
}

/// Parses an event file such as "event=0x01" (format `event` = config:0-63).
fn parse_event_config(text: &str) -> Option<u64> {
    text.trim().split(',').find_map(|term| {
        let v = term.trim().strip_prefix("event=")?;
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    })
}

/// Reads the msr PMU's description. `Ok(None)` when there is no msr PMU.
pub fn msr_pmu(src: &dyn Source) -> crate::Result<Option<MsrPmu>> {
    let type_path = format!("{MSR_PMU}/type");
    let Some(t) = src.read_value(&type_path)? else {
        return Ok(None);
    };
    let type_ = t
        .parse()
        .map_err(|_| crate::ReadError::parse(&type_path, format!("{t:?} is not a PMU type")))?;
    let mut events = BTreeMap::new();
    let dir = format!("{MSR_PMU}/events");
    for name in src.list(&dir)?.unwrap_or_default() {
        let path = format!("{dir}/{name}");
        if let Some(text) = src.read_value(&path)? {
            // Companion files (cpu_thermal_margin.unit) hold no event= term.
            if let Some(cfg) = parse_event_config(&text) {
                events.insert(name, cfg);
            }
        }
    }
    Ok(Some(MsrPmu { type_, events }))
}

/// An event of a PMU found in sysfs (type + config).
#[derive(Clone, Copy)]
struct PmuEvent {
    type_: u32,
    config: u64,
}

impl Event for PmuEvent {
    fn update_attrs(self, attr: &mut perf_event_open_sys::bindings::perf_event_attr) {
        attr.type_ = self.type_;
        attr.config = self.config;
    }
}

fn open_reason(e: &std::io::Error) -> Reason {
    Reason::Open {
        errno: e.raw_os_error().unwrap_or(0),
        error: e.to_string(),
    }
}

/// One opened group on one CPU: the leader is the first counter that opened
/// (a software dummy leader would do for hardware events, but msr events
/// under one read 0 on 6.x kernels, measured here), then the others.
struct OpenGroup {
    leader: PerfCounter,
    members: Vec<(Counter, Option<PerfCounter>)>,
}

impl OpenGroup {
    fn read(&mut self) -> std::io::Result<GroupRead> {
        let data = self.leader.read_group()?;
        let ns = |d: Option<std::time::Duration>| d.map_or(0, |d| d.as_nanos() as u64);
        let mut counts = BTreeMap::new();
        for (c, counter) in &self.members {
            let entry = data.get(counter.as_ref().unwrap_or(&self.leader));
            if let Some(entry) = entry {
                counts.insert(*c, entry.value());
            }
        }
        Ok(GroupRead {
            enabled_ns: ns(data.time_enabled()),
            running_ns: ns(data.time_running()),
            counts,
        })
    }
}

/// Builders count user, kernel and hypervisor time on one CPU for every task
/// (pid -1): steal hits whatever runs.
fn on_cpu(mut b: Builder<'static>, cpu: u32) -> Builder<'static> {
    b.one_cpu(cpu as usize)
        .any_pid()
        .include_kernel()
        .include_hv();
    b
}

/// Opens a group on `cpu` with `wanted` members; records each failure.
fn open_group(
    cpu: u32,
    wanted: &[(Counter, Builder<'static>)],
    missing: &mut Vec<(Counter, u32, Reason)>,
) -> Option<OpenGroup> {
    let mut leader: Option<PerfCounter> = None;
    let mut members: Vec<(Counter, Option<PerfCounter>)> = Vec::new();
    for (c, b) in wanted {
        let opened = match leader.as_mut() {
            None => {
                let mut lb = b.clone();
                lb.read_format(
                    ReadFormat::GROUP
                        | ReadFormat::ID
                        | ReadFormat::TOTAL_TIME_ENABLED
                        | ReadFormat::TOTAL_TIME_RUNNING,
                );
                lb.build().map(|l| {
                    leader = Some(l);
                    None
                })
            }
            Some(l) => b.build_with_group(l).map(Some),
        };
        match opened {
            Ok(m) => members.push((*c, m)),
            Err(e) => missing.push((*c, cpu, open_reason(&e))),
        }
    }
    let mut leader = leader?;
    if let Err(e) = leader.enable_group() {
        for (c, _) in &members {
            missing.push((*c, cpu, open_reason(&e)));
        }
        return None;
    }
    Some(OpenGroup { leader, members })
}

/// Per-CPU counter groups, opened once and read once per window.
pub struct CpuCounters {
    cpus: Vec<(u32, Vec<OpenGroup>)>,
    /// msr counters the msr PMU could not give, read from /dev/cpu/N/msr.
    devices: Option<MsrDevices>,
    opened: Vec<Counter>,
    missing: Vec<Missing>,
}

impl CpuCounters {
    /// Opens the groups on `cpus`. Never fails: what cannot be opened is
    /// listed by [`CpuCounters::missing`]. `src` gives the sysfs PMU list.
    pub fn open(src: &dyn Source, cpus: &[u32]) -> CpuCounters {
        Self::open_with_devices(src, cpus, Path::new(msr_dev::DEV_DIR))
    }

    /// [`CpuCounters::open`] with the msr devices under `dev_dir` (tests).
    pub fn open_with_devices(src: &dyn Source, cpus: &[u32], dev_dir: &Path) -> CpuCounters {
        let mut failures: Vec<(Counter, u32, Reason)> = Vec::new();
        let mut global: Vec<Missing> = Vec::new();
        let msr = match msr_pmu(src) {
            Ok(Some(p)) => Some(p),
            Ok(None) => {
                for c in MSR {
                    global.push(Missing {
                        counter: c,
                        reason: Reason::NoPmu {
                            path: MSR_PMU.to_string(),
                        },
                        cpus: Vec::new(),
                        device: None,
                    });
                }
                None
            }
            Err(e) => {
                for c in MSR {
                    global.push(Missing {
                        counter: c,
                        reason: Reason::BadSysfs {
                            error: e.to_string(),
                        },
                        cpus: Vec::new(),
                        device: None,
                    });
                }
                None
            }
        };
        let mut msr_wanted: Vec<(Counter, PmuEvent)> = Vec::new();
        if let Some(p) = &msr {
            for c in MSR {
                let name = c.msr_event().unwrap_or_default();
                match p.events.get(name) {
                    Some(cfg) => msr_wanted.push((
                        c,
                        PmuEvent {
                            type_: p.type_,
                            config: *cfg,
                        },
                    )),
                    None => global.push(Missing {
                        counter: c,
                        reason: Reason::NotListed {
                            path: format!("{MSR_PMU}/events/{name}"),
                        },
                        cpus: Vec::new(),
                        device: None,
                    }),
                }
            }
        }
        let mut out = Vec::new();
        for &cpu in cpus {
            let hw: Vec<(Counter, Builder<'static>)> = HARDWARE
                .iter()
                .filter_map(|c| Some((*c, on_cpu(Builder::new(c.hardware()?), cpu))))
                .collect();
            let msr_b: Vec<(Counter, Builder<'static>)> = msr_wanted
                .iter()
                .map(|(c, ev)| (*c, on_cpu(Builder::new(*ev), cpu)))
                .collect();
            let groups: Vec<OpenGroup> = [hw, msr_b]
                .iter()
                .filter_map(|w| open_group(cpu, w, &mut failures))
                .collect();
            out.push((cpu, groups));
        }
        let mut opened: Vec<Counter> = out
            .iter()
            .flat_map(|(_, gs)| gs.iter().flat_map(|g| g.members.iter().map(|m| m.0)))
            .collect();
        // The msr counters the PMU does not give: try the msr devices.
        let dev_wanted: Vec<Counter> = global.iter().map(|m| m.counter).collect();
        let mut devices = None;
        if !dev_wanted.is_empty() {
            let (d, dev_failures) = MsrDevices::open(dev_dir, cpus, &dev_wanted, monotonic_ns());
            let dev_opened = d.opened();
            global = with_device_failures(global, &dev_failures, &dev_opened);
            // Devices that read nothing are not kept open.
            if !dev_opened.is_empty() {
                opened.extend(dev_opened);
                devices = Some(d);
            }
        }
        opened.sort();
        opened.dedup();
        CpuCounters {
            cpus: out,
            devices,
            missing: merge_missing(global, failures, cpus.len(), &opened),
            opened,
        }
    }

    pub fn opened(&self) -> &[Counter] {
        &self.opened
    }

    pub fn missing(&self) -> &[Missing] {
        &self.missing
    }

    /// Reads every group once. A group whose read fails (its CPU went
    /// offline) is left out of that sample.
    pub fn read(&mut self, t_ns: u64) -> CounterSample {
        let mut cpus = Vec::with_capacity(self.cpus.len());
        for (cpu, groups) in &mut self.cpus {
            if groups.is_empty() {
                continue;
            }
            let reads: Vec<GroupRead> = groups.iter_mut().filter_map(|g| g.read().ok()).collect();
            cpus.push(CpuRead {
                cpu: *cpu,
                groups: reads,
            });
        }
        for (cpu, g) in self.devices.iter().flat_map(|d| d.read(t_ns)) {
            match cpus.iter_mut().find(|c| c.cpu == cpu) {
                Some(c) => c.groups.push(g),
                None => cpus.push(CpuRead {
                    cpu,
                    groups: vec![g],
                }),
            }
        }
        cpus.sort_by_key(|c| c.cpu);
        CounterSample { t_ns, cpus }
    }
}

/// The msr counters the PMU could not give, after trying the devices: a
/// counter no device read keeps its PMU reason plus the device's error; one
/// read on some CPUs only is missing on the others.
fn with_device_failures(
    global: Vec<Missing>,
    failures: &[DeviceFailure],
    dev_opened: &[Counter],
) -> Vec<Missing> {
    let mut out = Vec::new();
    for m in global {
        let failed: Vec<&DeviceFailure> =
            failures.iter().filter(|f| f.counter == m.counter).collect();
        if !dev_opened.contains(&m.counter) {
            out.push(Missing {
                device: failed.first().map(|f| f.error.clone()),
                ..m
            });
        } else if !failed.is_empty() {
            out.push(Missing {
                cpus: failed.iter().map(|f| f.cpu).collect(),
                device: Some(failed[0].error.clone()),
                ..m
            });
        }
    }
    out
}

/// One entry per (counter, reason); per-CPU failures name their CPUs unless
/// the counter failed everywhere.
fn merge_missing(
    mut global: Vec<Missing>,
    failures: Vec<(Counter, u32, Reason)>,
    ncpus: usize,
    opened: &[Counter],
) -> Vec<Missing> {
    let mut by: BTreeMap<(Counter, String), (Reason, Vec<u32>)> = BTreeMap::new();
    for (c, cpu, r) in failures {
        let key = (c, format!("{r:?}"));
        by.entry(key).or_insert_with(|| (r, Vec::new())).1.push(cpu);
    }
    for ((c, _), (reason, mut cpus)) in by {
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.len() == ncpus && !opened.contains(&c) {
            cpus.clear();
        }
        global.push(Missing {
            counter: c,
            reason,
            cpus,
            device: None,
        });
    }
    global.sort_by_key(|m| m.counter);
    global
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemFs, RootFs};

    /// Without an msr PMU the msr counters come from the msr devices where
    /// they read; the rest keep the PMU's reason and add the device's.
    #[test]
    fn msr_devices_stand_in_for_a_missing_msr_pmu() {
        let dir = tempfile::tempdir().unwrap();
        let d0 = dir.path().join("0");
        std::fs::create_dir_all(&d0).unwrap();
        // TSC and SMI_COUNT readable; the file ends before MPERF and APERF
        // (as a faulting rdmsr returns EIO).
        let mut regs = vec![0u8; 0x40];
        regs[0x10..0x18].copy_from_slice(&12345u64.to_le_bytes());
        std::fs::write(d0.join("msr"), &regs).unwrap();
        let no_pmu = MemFs::new("no msr pmu");
        let mut c = CpuCounters::open_with_devices(&no_pmu, &[0], dir.path());
        assert!(c.opened().contains(&Counter::Tsc));
        assert!(c.opened().contains(&Counter::Smi));
        for gone in [Counter::Aperf, Counter::Mperf] {
            let m = c.missing().iter().find(|m| m.counter == gone).unwrap();
            assert!(matches!(m.reason, Reason::NoPmu { .. }), "{m:?}");
            assert!(m.device.as_deref().unwrap().contains("/0/msr"), "{m:?}");
        }
        assert!(c
            .missing()
            .iter()
            .all(|m| m.counter != Counter::Tsc && m.counter != Counter::Smi));
        let s = c.read(1_000);
        let cpu0 = s.cpus.iter().find(|r| r.cpu == 0).unwrap();
        assert_eq!(cpu0.get(Counter::Tsc).unwrap().0, 12345);
    }

    #[test]
    fn msr_pmu_description_is_parsed_and_companion_files_skipped() {
        let fs = MemFs::new("t")
            .with("/sys/bus/event_source/devices/msr/type", "9\n")
            .with(
                "/sys/bus/event_source/devices/msr/events/tsc",
                "event=0x00\n",
            )
            .with(
                "/sys/bus/event_source/devices/msr/events/aperf",
                "event=0x01\n",
            )
            .with(
                "/sys/bus/event_source/devices/msr/events/cpu_thermal_margin.unit",
                "C\n",
            );
        let p = msr_pmu(&fs).unwrap().unwrap();
        assert_eq!(p.type_, 9);
        assert_eq!(
            p.events,
            BTreeMap::from([("aperf".to_string(), 1), ("tsc".to_string(), 0)])
        );
        assert!(msr_pmu(&MemFs::new("e")).unwrap().is_none());
        let bad = MemFs::new("b").with("/sys/bus/event_source/devices/msr/type", "msr\n");
        let e = msr_pmu(&bad).unwrap_err().to_string();
        assert!(e.contains("/sys/bus/event_source/devices/msr/type"), "{e}");
    }

    #[test]
    fn missing_msr_pmu_names_every_msr_counter() {
        let c = CpuCounters::open(&MemFs::new("none"), &[]);
        let names: Vec<_> = c.missing().iter().map(|m| m.counter).collect();
        assert_eq!(names, MSR.to_vec());
        assert!(c
            .missing()
            .iter()
            .all(|m| matches!(&m.reason, Reason::NoPmu { path } if path == MSR_PMU)));
    }

    #[test]
    fn per_cpu_failures_merge_into_one_entry_per_reason() {
        let r = Reason::Open {
            errno: 2,
            error: "No such file or directory".into(),
        };
        let f = vec![
            (Counter::Cycles, 0, r.clone()),
            (Counter::Cycles, 1, r.clone()),
            (Counter::Smi, 1, r.clone()),
        ];
        let m = merge_missing(Vec::new(), f, 2, &[Counter::Smi]);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].counter, Counter::Cycles);
        assert!(m[0].cpus.is_empty(), "failed everywhere: no CPU list");
        assert_eq!(m[1].cpus, vec![1], "smi opened on cpu0, failed on cpu1");
    }

    /// Every counter is either opened or missing with a reason; what the
    /// msr PMU lists opens (as root) and counts. (The CLI's live_hardware
    /// test compares the hardware PMU with a raw perf_event_open.)
    #[test]
    fn live_open_accounts_for_every_counter() {
        let mut c = CpuCounters::open(&RootFs::live(), &[0]);
        for counter in HARDWARE.iter().chain(MSR.iter()) {
            let opened = c.opened().contains(counter);
            let missing = c.missing().iter().any(|m| m.counter == *counter);
            assert!(
                opened ^ missing,
                "{counter:?}: opened {opened}, missing {missing}"
            );
        }
        // The msr PMU lists what exists; every listed counter must open as root.
        let listed = std::fs::read_dir("/sys/bus/event_source/devices/msr/events")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let root = unsafe { libc::geteuid() } == 0;
        for counter in MSR {
            let name = counter.msr_event().unwrap();
            if root && listed.iter().any(|l| l == name) {
                assert!(
                    c.opened().contains(&counter),
                    "{name} listed but not opened: {:?}",
                    c.missing()
                );
            }
            if !listed.iter().any(|l| l == name) {
                assert!(!c.opened().contains(&counter));
            }
        }
        let a = c.read(1);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = c.read(2);
        if let (Some(x), Some(y)) = (a.cpus.first(), b.cpus.first()) {
            for g in x.groups.iter().zip(&y.groups) {
                assert!(g.1.enabled_ns > g.0.enabled_ns, "group time advances");
            }
            if let (Some((t0, _)), Some((t1, _))) = (x.get(Counter::Tsc), y.get(Counter::Tsc)) {
                assert!(t1 > t0, "tsc advances");
            }
        }
    }

    /// The group path (leader plus members read with one read(2), members
    /// found by id) with software events standing in for the hardware ones,
    /// which this machine may lack.
    #[test]
    fn group_members_are_read_by_id_with_the_group_times() {
        use perf_event::events::Software;
        let wanted = [
            (
                Counter::Cycles,
                on_cpu(Builder::new(Software::CPU_CLOCK), 0),
            ),
            (
                Counter::Instructions,
                on_cpu(Builder::new(Software::CONTEXT_SWITCHES), 0),
            ),
            (
                Counter::CacheMisses,
                on_cpu(Builder::new(Software::PAGE_FAULTS), 0),
            ),
        ];
        let mut missing = Vec::new();
        let mut g = match open_group(0, &wanted, &mut missing) {
            Some(g) => g,
            // Per-CPU events need root or CAP_PERFMON; the failure is recorded.
            None => {
                assert_eq!(missing.len(), wanted.len(), "{missing:?}");
                return;
            }
        };
        let a = g.read().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = g.read().unwrap();
        let keys: Vec<_> = b.counts.keys().copied().collect();
        assert_eq!(
            keys,
            vec![Counter::Cycles, Counter::Instructions, Counter::CacheMisses]
        );
        // cpu-clock counts ns of CPU 0: it advances by about the enabled time.
        let clock = b.counts[&Counter::Cycles] - a.counts[&Counter::Cycles];
        let enabled = b.enabled_ns - a.enabled_ns;
        assert!(enabled >= 15_000_000, "{enabled}");
        assert!(
            clock > enabled / 2 && clock <= enabled + 1_000_000,
            "{clock} vs {enabled}"
        );
        assert!(b.running_ns <= b.enabled_ns);
    }

    proptest::proptest! {
        #[test]
        fn event_config_parser_never_panics(s in ".{0,40}") {
            let _ = parse_event_config(&s);
        }
    }
}
