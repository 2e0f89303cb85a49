//! The BPF route: loads the committed CO-RE object (bpf/wait_by.bpf.o) with
//! `aya` (pure Rust, no libbpf/libelf/clang at build or run time), attaches
//! its tp_btf programs, and reads the in-kernel aggregates once per
//! interval. The charging rules live in the C program (mirroring
//! [`crate::aggregate`]); this file only moves counters into the model.

pub use crate::bpf_info::ProgStats;
use crate::bpf_ksym::RqPath;
use crate::error::{CollectError, Result};
use crate::hist::{EpisodeHist, BUCKETS};
use crate::model::{Culprit, Route, SchedSample, SchedStats, ThreadWaits};
use crate::route::RouteImpl;
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{BtfTracePoint, Program, ProgramError, RawTracePoint};
use aya::{Btf, Ebpf, EbpfLoader, Pod};
use std::collections::{BTreeMap, BTreeSet};
use stealscope_readers::clock::monotonic_ns;

static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/wait_by.bpf.o");

/// `tp_btf` programs and the tracepoint each is loaded for.
const PROGRAMS: &[(&str, &str)] = &[
    ("handle_switch", "sched_switch"),
    ("handle_wakeup", "sched_wakeup"),
    ("handle_wakeup_new", "sched_wakeup_new"),
    ("handle_migrate", "sched_migrate_task"),
];

/// `raw_tp` programs and their tracepoint: they feed the `irq` share of a
/// wait. Hard and soft interrupts have programs of their own, so that no
/// program is ever re-entered on a CPU (the kernel skips a re-entered
/// program, see wait_by.bpf.c).
const RAW_PROGRAMS: &[(&str, &str)] = &[
    ("handle_hardirq_entry", "irq_handler_entry"),
    ("handle_hardirq_exit", "irq_handler_exit"),
    ("handle_softirq_entry", "softirq_entry"),
    ("handle_softirq_exit", "softirq_exit"),
];

// Layouts shared with bpf/wait_by.bpf.c (same field order and sizes).
#[repr(C)]
#[derive(Clone, Copy)]
struct CpuState {
    events: u64,
    lost: u64,
    overflows: u64,
    missed: u64,
    nq: i64,
    hard_ns: u64,
    hard_since: u64,
    soft_ns: u64,
    soft_since: u64,
    soft_hard0: u64,
    head: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Victim {
    since: u64,
    ep_kd: u64,
    irq0: u64,
    st_kd: u64,
    acct: u64,
    pcount: u64,
    cpu: u32,
    state: u32,
    irq_ns: u64,
    idle_ns: u64,
    unknown_ns: u64,
    count: u64,
    sum_ns: u64,
    max_ns: u64,
    over_1ms: u64,
    over_10ms: u64,
    buckets: [u64; BUCKETS],
}

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ChargeKey {
    victim: u32,
    tid: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Charge {
    ns: u64,
    tgid: u32,
    kthread: u32,
    comm: [u8; 16],
}

// SAFETY: plain C layouts without padding holes the kernel could leave
// uninitialised in a way Rust cares about (all fields are integers).
unsafe impl Pod for CpuState {}
unsafe impl Pod for Victim {}
unsafe impl Pod for ChargeKey {}
unsafe impl Pod for Charge {}

const _: () = assert!(std::mem::size_of::<Victim>() == 120 + 8 * BUCKETS);

fn bpf_err(what: &str, e: impl std::error::Error) -> CollectError {
    CollectError::Bpf {
        what: what.into(),
        msg: chain(&e),
    }
}

/// An error with its sources, on one line.
/// A program of the object as its type, or why not.
fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> std::result::Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("program {name} missing from the object"))?
        .try_into()
        .map_err(|e: ProgramError| chain(&e))
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        src = c.source();
    }
    s
}

/// The object loaded with the run queue reached by `path`, every program
/// attached, or why not.
fn load_attach(btf: &Btf, path: RqPath) -> std::result::Result<Ebpf, String> {
    let object = crate::bpf_ksym::resolve_runqueues(OBJECT, btf, path)?;
    let object = crate::bpf_ksym::as_bytes(&object, OBJECT.len());
    let cpus = aya::util::nr_cpus()
        .map_err(|(path, e)| format!("{path}: {e}"))?
        .max(1) as u32;
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("rings", cpus)
        .load(object)
        .map_err(|e| explain(&chain(&e)))?;
    for (name, tp) in PROGRAMS {
        let prog: &mut BtfTracePoint = program(&mut ebpf, name)?;
        prog.load(tp, btf)
            .map_err(|e| explain(&format!("loading {name}: {}", chain(&e))))?;
        prog.attach()
            .map_err(|e| explain(&format!("attaching {name} to {tp}: {}", chain(&e))))?;
    }
    for (name, tp) in RAW_PROGRAMS {
        let prog: &mut RawTracePoint = program(&mut ebpf, name)?;
        prog.load()
            .map_err(|e| explain(&format!("loading {name}: {}", chain(&e))))?;
        prog.attach(tp)
            .map_err(|e| explain(&format!("attaching {name} to {tp}: {}", chain(&e))))?;
    }
    Ok(ebpf)
}

pub(crate) struct BpfRoute {
    ebpf: Ebpf,
    watched: BTreeSet<u32>,
}

impl BpfRoute {
    /// Loads and attaches everything, or says in one line why not.
    pub(crate) fn start() -> std::result::Result<BpfRoute, String> {
        const BTF: &str = "/sys/kernel/btf/vmlinux";
        if !std::path::Path::new(BTF).exists() {
            return Err(format!("{BTF} missing (kernel built without BTF)"));
        }
        let btf = Btf::from_sys_fs().map_err(|e| format!("{BTF}: {}", chain(&e)))?;
        // Most kernels have CONFIG_FAIR_GROUP_SCHED; the other path is
        // tried only when that one does not load, and both reasons are
        // kept when neither does.
        let mut why = Vec::new();
        let mut loaded = None;
        for path in [RqPath::CfsRq, RqPath::Runqueues] {
            match load_attach(&btf, path) {
                Ok(e) => {
                    loaded = Some(e);
                    break;
                }
                // Only a program the verifier refused can depend on
                // the path (a map or permission error would repeat).
                Err(e) if e.starts_with("loading ") => why.push(format!("{}: {e}", path.as_str())),
                Err(e) => return Err(e),
            }
        }
        let Some(ebpf) = loaded else {
            return Err(why.join("; "));
        };
        Ok(BpfRoute {
            ebpf,
            watched: BTreeSet::new(),
        })
    }

    fn victims(&self) -> Result<HashMap<&MapData, u32, Victim>> {
        HashMap::try_from(self.ebpf.map("watched").expect("map in object"))
            .map_err(|e| bpf_err("watched", e))
    }

    /// Each program's kernel counters, by name.
    fn kernel_prog_stats(&self) -> Result<Vec<(&'static str, ProgStats)>> {
        let names = PROGRAMS.iter().chain(RAW_PROGRAMS).map(|(n, _)| *n);
        names
            .map(|name| {
                let prog = self.ebpf.program(name).expect("program in object");
                let fd = prog.fd().map_err(|e| bpf_err(name, e))?;
                let st = crate::bpf_info::prog_stats(fd).map_err(|e| bpf_err(name, e))?;
                Ok((name, st))
            })
            .collect()
    }

    fn charges(&self) -> Result<HashMap<&MapData, ChargeKey, Charge>> {
        HashMap::try_from(self.ebpf.map("charges").expect("map in object"))
            .map_err(|e| bpf_err("charges", e))
    }
}

/// Tids the program's bitmap covers (the kernel's PID_MAX_LIMIT); a tid
/// past it is still found, by the slower hash lookup alone.
const TID_BITS: u32 = 1 << 22;

impl BpfRoute {
    /// Sets or clears the `tidbits` bit of each tid, which lets the
    /// program skip the hash lookup for threads nobody watches.
    fn set_tid_bits(&mut self, tids: &[u32], on: bool) -> Result<()> {
        let map = self.ebpf.map_mut("tidbits").expect("map in object");
        let mut bits: Array<&mut MapData, u64> =
            Array::try_from(map).map_err(|e| bpf_err("tidbits", e))?;
        for &t in tids.iter().filter(|&&t| t < TID_BITS) {
            let word = bits.get(&(t >> 6), 0).map_err(|e| bpf_err("tidbits", e))?;
            let bit = 1u64 << (t & 63);
            let word = if on { word | bit } else { word & !bit };
            bits.set(t >> 6, word, 0)
                .map_err(|e| bpf_err("tidbits", e))?;
        }
        Ok(())
    }
}

/// Adds the privilege hint to permission errors.
fn explain(msg: &str) -> String {
    if msg.contains("Operation not permitted") || msg.contains("os error 1)") {
        format!("{msg} (needs root, or CAP_BPF and CAP_PERFMON)")
    } else {
        msg.to_string()
    }
}

fn comm(b: &[u8; 16]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl RouteImpl for BpfRoute {
    fn route(&self) -> Route {
        Route::Bpf
    }

    fn watch(&mut self, tids: &[u32]) -> Result<()> {
        let want: BTreeSet<u32> = tids.iter().copied().filter(|&t| t != 0).collect();
        let gone: Vec<u32> = self.watched.difference(&want).copied().collect();
        let new: Vec<u32> = want.difference(&self.watched).copied().collect();
        {
            let map = self.ebpf.map_mut("watched").expect("map in object");
            let mut victims: HashMap<&mut MapData, u32, Victim> =
                HashMap::try_from(map).map_err(|e| bpf_err("watched", e))?;
            for t in &gone {
                let _ = victims.remove(t);
            }
            // SAFETY: Victim is plain integers; all-zero is its start state
            // (ST_UNKNOWN: the first switch tells the program the truth).
            let zero: Victim = unsafe { std::mem::zeroed() };
            for t in &new {
                victims
                    .insert(t, zero, 0)
                    .map_err(|e| bpf_err(&format!("watched insert {t}"), e))?;
            }
        }
        if !gone.is_empty() {
            let map = self.ebpf.map_mut("charges").expect("map in object");
            let mut charges: HashMap<&mut MapData, ChargeKey, Charge> =
                HashMap::try_from(map).map_err(|e| bpf_err("charges", e))?;
            let stale: Vec<ChargeKey> = charges
                .keys()
                .filter_map(|k| k.ok())
                .filter(|k| gone.contains(&k.victim))
                .collect();
            for k in stale {
                let _ = charges.remove(&k);
            }
        }
        self.set_tid_bits(&gone, false)?;
        self.set_tid_bits(&new, true)?;
        self.watched = want;
        let map = self.ebpf.map_mut("gate").expect("map in object");
        let mut gate: Array<&mut MapData, u64> =
            Array::try_from(map).map_err(|e| bpf_err("gate", e))?;
        gate.set(0, self.watched.len() as u64, 0)
            .map_err(|e| bpf_err("gate", e))
    }

    fn program_stats(&self) -> Result<Vec<(&'static str, ProgStats)>> {
        self.kernel_prog_stats()
    }

    fn read(&mut self) -> Result<SchedSample> {
        let monotonic_ns = monotonic_ns();
        let mut threads = BTreeMap::new();
        for item in self.victims()?.iter() {
            let (tid, v) = item.map_err(|e| bpf_err("watched read", e))?;
            let counts = v.buckets.to_vec();
            threads.insert(
                tid,
                ThreadWaits {
                    tid,
                    by_thread: BTreeMap::new(),
                    irq_ns: v.irq_ns,
                    idle_ns: v.idle_ns,
                    unknown_ns: v.unknown_ns,
                    episodes: EpisodeHist {
                        counts,
                        count: v.count,
                        sum_ns: v.sum_ns,
                        max_ns: v.max_ns,
                        over_1ms: v.over_1ms,
                        over_10ms: v.over_10ms,
                    },
                },
            );
        }
        for item in self.charges()?.iter() {
            let (k, c) = item.map_err(|e| bpf_err("charges read", e))?;
            if let Some(t) = threads.get_mut(&k.victim) {
                let culprit = Culprit {
                    tid: k.tid,
                    tgid: c.tgid,
                    comm: comm(&c.comm),
                    kthread: c.kthread != 0,
                };
                *t.by_thread.entry(culprit).or_insert(0) += c.ns;
            }
        }
        let cpus: PerCpuArray<&MapData, CpuState> =
            PerCpuArray::try_from(self.ebpf.map("cpus").expect("map in object"))
                .map_err(|e| bpf_err("cpus", e))?;
        let mut stats = SchedStats::default();
        for c in cpus.get(&0, 0).map_err(|e| bpf_err("cpus read", e))?.iter() {
            stats.events += c.events;
            stats.lost_events += c.lost;
            stats.overflows += c.overflows;
            stats.missed_switches += c.missed;
        }
        // A run the kernel skipped (the program was already running on
        // that CPU) is an event the program never saw.
        for (_, p) in self.kernel_prog_stats()? {
            stats.lost_events += p.recursion_misses;
        }
        Ok(SchedSample {
            route: Route::Bpf,
            monotonic_ns,
            threads,
            stats,
        })
    }
}
