//! The recording format `stealscope-recording/1` (docs/recording-format.md):
//! constants, frame kinds, the JSON frames (header, end) and the records a
//! reader hands out.

use crate::cpuid::CpuidDump;
use crate::interrupts::Interrupts;
use crate::kvmclock::KvmClockAnchor;
use crate::perf::{Counter, CounterSample, Missing};
use crate::stat::ProcStat;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stealscope_who::Culprit;

/// First bytes of every recording. As PNG's: a high byte (caught by 7-bit
/// transfers), a name, CR LF and LF (caught by newline conversion), ^Z.
pub const MAGIC: [u8; 8] = [0x89, b'S', b'S', b'R', b'\r', b'\n', 0x1a, b'\n'];
pub const FORMAT: &str = "stealscope-recording/1";
pub const FORMAT_PREFIX: &str = "stealscope-recording/";
/// The version this build writes, and the highest `min_reader_version` it reads.
pub const VERSION: u32 = 1;
/// Frame = u32 length (LE) + u8 kind + payload + u32 CRC-32 (LE) of kind and payload.
pub const FRAME_OVERHEAD: u64 = 9;
/// No frame is larger: a checkpoint of a 1024-CPU host compresses to a few
/// MiB. A larger length is corruption, not data.
pub const MAX_FRAME_LEN: u32 = 64 << 20;
/// No payload inflates to more than this (a deflate bomb is an error).
pub const MAX_INFLATED: usize = 256 << 20;

/// Frame kinds. A reader skips kinds it does not know (by their length), so
/// later versions may add kinds without breaking version-1 readers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Header = 1,
    Checkpoint = 2,
    Stat = 3,
    IrqTable = 4,
    Irq = 5,
    VcpuTable = 6,
    Vcpu = 7,
    Counters = 8,
    Probe = 9,
    Note = 10,
    End = 11,
    Culprits = 12,
    Steal = 13,
}

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Header,
            2 => Checkpoint,
            3 => Stat,
            4 => IrqTable,
            5 => Irq,
            6 => VcpuTable,
            7 => Vcpu,
            8 => Counters,
            9 => Probe,
            10 => Note,
            11 => End,
            12 => Culprits,
            13 => Steal,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use Kind::*;
        match self {
            Header => "header",
            Checkpoint => "checkpoint",
            Stat => "stat",
            IrqTable => "irq-table",
            Irq => "irq",
            VcpuTable => "vcpu-table",
            Vcpu => "vcpu",
            Counters => "counters",
            Probe => "probe",
            Note => "note",
            End => "end",
            Culprits => "culprits",
            Steal => "steal",
        }
    }
}

/// Which counters opened and why the others did not (counters.json of a
/// snapshot without the samples, which follow as frames).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterInfo {
    pub opened: Vec<Counter>,
    pub missing: Vec<Missing>,
}

/// The first frame (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// "stealscope-recording/1".
    pub format: String,
    /// Version of the writer.
    pub version: u32,
    /// Oldest reader version that can read this file: a later writer that
    /// only adds frame kinds keeps this at 1.
    pub min_reader_version: u32,
    /// /proc/stat samples per second.
    pub rate_hz: f64,
    /// /proc/interrupts samples per second; None: not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_rate_hz: Option<f64>,
    /// Seconds between scans of the vCPU threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_scan_s: Option<f64>,
    pub checkpoint_s: f64,
    /// How long the recorder was asked to run (`--duration`); None: until
    /// stopped. A cut-off file says from it how much is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// USER_HZ, the unit of /proc/stat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clk_tck: Option<u64>,
    pub start_unix_s: f64,
    /// CLOCK_MONOTONIC at `start_unix_s`; every time in the file is on this clock.
    pub start_mono_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stealscope_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuid: Option<CpuidDump>,
    /// Present when counters were tried (live root only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterInfo>,
    /// Probes whose windows follow ("wakeup").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<String>,
    /// Where steal came from; None: a recording from before issue 30
    /// (/proc/stat polled at `rate_hz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<StealSource>,
    /// kvm-clock beside CLOCK_MONOTONIC at the start (a KVM guest's live
    /// recording), or why not; None: not tried (a --root, or a recording
    /// from before issue 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_clock: Option<KvmClockInfo>,
}

/// The start's kvm-clock anchor, or why there is none (one line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum KvmClockInfo {
    Anchored { anchor: KvmClockAnchor },
    Unavailable { reason: String },
}

impl KvmClockInfo {
    /// `clock` (as opened) anchored now, or why not.
    pub fn of(
        clock: &Result<crate::kvmclock::KvmClock, crate::kvmclock::KvmClockError>,
    ) -> KvmClockInfo {
        let anchor = match clock {
            Ok(c) => c.anchor(),
            Err(e) => Err(e.clone()),
        };
        match anchor {
            Ok(anchor) => KvmClockInfo::Anchored { anchor },
            Err(e) => KvmClockInfo::Unavailable {
                reason: e.to_string(),
            },
        }
    }

    pub fn anchor(&self) -> Option<KvmClockAnchor> {
        match self {
            KvmClockInfo::Anchored { anchor } => Some(*anchor),
            KvmClockInfo::Unavailable { .. } => None,
        }
    }
}

/// Which route measured steal while recording, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "route", rename_all = "kebab-case")]
pub enum StealSource {
    /// The guest steal collector (BPF): every steal-clock advance counted
    /// in the checkpoints, each at or over `threshold_ns` in steal frames;
    /// its ring drained every `drain_ms`. /proc/stat is still sampled at
    /// `rate_hz` for the other columns.
    Exact { threshold_ns: u64, drain_ms: u64 },
    /// /proc/stat's steal column, polled at `rate_hz`; `reason`: why not
    /// the collector (one line).
    ProcStat { reason: String },
}

/// One steal episode at or over the threshold, as the collector saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StealEpisodeRecord {
    /// CLOCK_MONOTONIC when the advance was seen, ns.
    pub t_ns: u64,
    pub cpu: u32,
    pub ns: u64,
    /// The task that had the CPU; None: idle (idle steal).
    pub victim: Option<StealVictimRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StealVictimRecord {
    pub tid: u32,
    /// The process (thread group) id.
    pub pid: u32,
    /// The thread's comm.
    pub comm: String,
}

impl Header {
    /// A version-1 header; the optional facts are left for the writer to fill in.
    pub fn new(rate_hz: f64, start_unix_s: f64, start_mono_ns: u64) -> Header {
        Header {
            format: FORMAT.to_string(),
            version: VERSION,
            min_reader_version: 1,
            rate_hz,
            irq_rate_hz: None,
            host_scan_s: None,
            checkpoint_s: 60.0,
            duration_s: None,
            hostname: None,
            kernel: None,
            clk_tck: None,
            start_unix_s,
            start_mono_ns,
            stealscope_version: None,
            cpuid: None,
            counters: None,
            probes: Vec::new(),
            steal: None,
            kvm_clock: None,
        }
    }
}

/// The last frame of a recording that ended cleanly (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndInfo {
    pub end_mono_ns: u64,
    /// "duration" or "signal".
    pub reason: String,
    pub stat_samples: u64,
    /// kvm-clock at the end, with the header's the second anchor of the
    /// episodes' kvm-clock times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_clock: Option<KvmClockAnchor>,
}

/// One vCPU thread in a vCPU table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VcpuEntry {
    pub pid: u32,
    pub tid: u32,
    pub vcpu: u32,
    /// The VM's name as discovery reports it (with the pid when two share one).
    pub vm: String,
}

/// A thread's cumulative schedstat: ns on a CPU and ns waiting on a run queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadTimes {
    pub run_ns: u64,
    pub wait_ns: u64,
}

/// One latency window of a probe on one CPU (None: all CPUs together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRecord {
    pub probe: String,
    pub cpu: Option<u32>,
    pub start_ns: u64,
    pub wall_ns: u64,
    pub samples: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// (upper bound ns, count) of the non-empty buckets.
    pub buckets: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StatSample {
    pub t_ns: u64,
    /// The cpu rows (total and per CPU); the other lines are not recorded.
    pub stat: ProcStat,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IrqSample {
    pub t_ns: u64,
    pub irq: Interrupts,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VcpuSample {
    pub t_ns: u64,
    pub threads: Vec<(VcpuEntry, ThreadTimes)>,
}

/// Who stole each VM's vCPU time between two host scans (scheduler
/// events): per VM its largest culprits and `other`, ns of vCPU wait.
#[derive(Debug, Clone, PartialEq)]
pub struct CulpritScan {
    pub t_ns: u64,
    /// (VM name, [(culprit, ns)]), most wait first. A culprit is stored
    /// by kind and name only (a series label: no VM, no pid).
    pub vms: Vec<(String, Vec<(Culprit, u64)>)>,
}

/// What a reader hands out, one per frame (table frames are folded into
/// the samples that follow them).
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// The files of a snapshot side, by absolute path.
    Checkpoint {
        t_ns: u64,
        files: BTreeMap<String, Vec<u8>>,
    },
    Stat(Vec<StatSample>),
    Irq(Vec<IrqSample>),
    Vcpu(Vec<VcpuSample>),
    Counters(Vec<CounterSample>),
    Probes(Vec<ProbeRecord>),
    Culprits(Vec<CulpritScan>),
    /// Steal episodes at or over the threshold (exact route).
    Steal(Vec<StealEpisodeRecord>),
    Note {
        t_ns: u64,
        text: String,
    },
    End(EndInfo),
    /// A frame of a kind this build does not know (a newer writer), skipped.
    Unknown {
        kind: u8,
        offset: u64,
    },
}
