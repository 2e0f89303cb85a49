//! In-memory machines for the rules' unit tests (the pattern of below's
//! `TestProcfs`): the two sides of an interval as [`MemFs`] trees, a
//! `/proc/stat` per side made from per-CPU tick counts, and any other file
//! given as the text the kernel prints. A test states the few files its rule
//! reads; everything else is absent, as on a minimal guest. [`host`] adds
//! VMs, host processes and their scheduling groups.

pub mod host;

use crate::finding::Finding;
use stealscope_model::MachineModel;
use stealscope_readers::snapshot::{Hardware, Meta, RawSample, Snapshot, FORMAT};
use stealscope_readers::MemFs;

/// Ticks (USER_HZ 100) one CPU spent over a span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ticks {
    pub busy: u64,
    pub idle: u64,
    pub steal: u64,
}

pub const fn ticks(busy: u64, idle: u64, steal: u64) -> Ticks {
    Ticks { busy, idle, steal }
}

/// Counters at t0, so that deltas do not start from zero.
const BASE: Ticks = ticks(100_000, 400_000, 1_000);

#[derive(Clone)]
pub struct TestMachine {
    interval_s: f64,
    /// Per CPU, over the whole interval.
    interval: Vec<Ticks>,
    /// Per 100 ms window, per CPU (empty: no sample series).
    windows: Vec<Vec<Ticks>>,
    t0: MemFs,
    t1: MemFs,
}

fn stat_text(cpus: &[Ticks]) -> String {
    let row =
        |name: &str, t: Ticks| format!("{name} {} 0 0 {} 0 0 0 {} 0 0\n", t.busy, t.idle, t.steal);
    let sum = cpus.iter().fold(ticks(0, 0, 0), |a, t| {
        ticks(a.busy + t.busy, a.idle + t.idle, a.steal + t.steal)
    });
    let mut s = row("cpu ", sum);
    for (i, t) in cpus.iter().enumerate() {
        s += &row(&format!("cpu{i}"), *t);
    }
    s
}

/// `/proc/meminfo` as a 6.x kernel prints it (`fs/proc/meminfo.c`), every
/// figure but the three given left at 0.
pub fn meminfo(total_kb: u64, available_kb: u64, swap_free_kb: u64) -> String {
    let mut s = String::new();
    for (k, v) in [
        ("MemTotal", total_kb),
        ("MemFree", available_kb),
        ("MemAvailable", available_kb),
    ] {
        s += &format!("{:<16}{v:>8} kB\n", format!("{k}:"));
    }
    for k in [
        "Buffers",
        "Cached",
        "SwapCached",
        "Active",
        "Inactive",
        "Active(anon)",
        "Inactive(anon)",
        "Active(file)",
        "Inactive(file)",
        "Unevictable",
        "Mlocked",
    ] {
        s += &format!("{:<16}{:>8} kB\n", format!("{k}:"), 0);
    }
    s += &format!("{:<16}{swap_free_kb:>8} kB\n", "SwapTotal:");
    s += &format!("{:<16}{swap_free_kb:>8} kB\n", "SwapFree:");
    for k in [
        "Dirty",
        "Writeback",
        "AnonPages",
        "Mapped",
        "Shmem",
        "KReclaimable",
        "Slab",
        "SReclaimable",
        "SUnreclaim",
        "KernelStack",
        "PageTables",
        "NFS_Unstable",
        "Bounce",
        "WritebackTmp",
        "CommitLimit",
        "Committed_AS",
        "VmallocTotal",
        "VmallocUsed",
        "VmallocChunk",
        "Percpu",
        "HardwareCorrupted",
        "AnonHugePages",
        "ShmemHugePages",
        "ShmemPmdMapped",
        "FileHugePages",
        "FilePmdMapped",
    ] {
        s += &format!("{:<16}{:>8} kB\n", format!("{k}:"), 0);
    }
    for k in [
        "HugePages_Total",
        "HugePages_Free",
        "HugePages_Rsvd",
        "HugePages_Surp",
    ] {
        s += &format!("{:<16}{:>8}\n", format!("{k}:"), 0);
    }
    s += "Hugepagesize:       2048 kB\nHugetlb:               0 kB\n";
    s
}

fn add(a: Ticks, b: Ticks) -> Ticks {
    ticks(a.busy + b.busy, a.idle + b.idle, a.steal + b.steal)
}

impl TestMachine {
    /// A quiet 2-CPU guest over 5 s: a quarter busy, no steal.
    pub fn guest() -> Self {
        TestMachine {
            interval_s: 5.0,
            interval: vec![ticks(125, 375, 0); 2],
            windows: Vec::new(),
            t0: MemFs::new("t0"),
            t1: MemFs::new("t1"),
        }
    }

    /// What each CPU did over the interval (the CPU count follows).
    pub fn cpus(mut self, per_cpu: &[Ticks]) -> Self {
        self.interval = per_cpu.to_vec();
        self
    }

    /// A sample series of 100 ms windows; the interval becomes their sum.
    pub fn windows(mut self, windows: Vec<Vec<Ticks>>) -> Self {
        let n = windows[0].len();
        self.interval = (0..n)
            .map(|c| windows.iter().fold(ticks(0, 0, 0), |a, w| add(a, w[c])))
            .collect();
        self.interval_s = windows.len() as f64 / 10.0;
        self.windows = windows;
        self
    }

    /// A file with the same content on both sides.
    pub fn file(mut self, path: &str, text: impl AsRef<[u8]>) -> Self {
        let text = text.as_ref();
        self.t0.insert(path, text);
        self.t1.insert(path, text);
        self
    }

    /// A file as it reads at the start, and at the end, of the interval (a
    /// `/proc/stat` given so replaces the one made from ticks).
    pub fn files(mut self, path: &str, t0: &str, t1: &str) -> Self {
        self.t0.insert(path, t0);
        self.t1.insert(path, t1);
        self
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut t0 = self.t0.clone();
        let mut t1 = self.t1.clone();
        let start: Vec<Ticks> = self.interval.iter().map(|_| BASE).collect();
        let end: Vec<Ticks> = self.interval.iter().map(|t| add(BASE, *t)).collect();
        for (fs, side) in [(&mut t0, &start), (&mut t1, &end)] {
            fs.files
                .entry("/proc/stat".into())
                .or_insert_with(|| stat_text(side).into_bytes());
        }
        t0.insert("/proc/uptime", "1000.00 0.00\n");
        t1.insert(
            "/proc/uptime",
            format!("{:.2} 0.00\n", 1000.0 + self.interval_s),
        );
        let mut samples = Vec::new();
        let mut at = start.clone();
        if !self.windows.is_empty() {
            samples.push(RawSample {
                t_ns: 0,
                stat: stat_text(&at),
            });
        }
        for (i, w) in self.windows.iter().enumerate() {
            at = at.iter().zip(w).map(|(a, d)| add(*a, *d)).collect();
            samples.push(RawSample {
                t_ns: (i as u64 + 1) * 100_000_000,
                stat: stat_text(&at),
            });
        }
        Snapshot {
            meta: Meta {
                format: FORMAT.to_string(),
                interval_s: self.interval_s,
                hostname: Some("test".into()),
                taken_unix_s: None,
                clk_tck: Some(100),
                kernel: None,
                stealscope_version: None,
                sample_hz: (!samples.is_empty()).then_some(10.0),
            },
            t0,
            t1,
            samples,
            hardware: Hardware::default(),
            damage: None,
        }
    }

    pub fn model(&self) -> MachineModel {
        MachineModel::build(&self.snapshot()).expect("test machine builds a model")
    }

    /// What `rule` finds on this machine (any rule of `rules::GUEST_RULES`;
    /// its type is spelled out so that this module does not use `rules`).
    pub fn run(&self, rule: fn(&MachineModel, &mut Vec<Finding>)) -> Vec<Finding> {
        let mut out = Vec::new();
        rule(&self.model(), &mut out);
        out
    }
}
