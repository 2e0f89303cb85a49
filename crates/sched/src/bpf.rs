//! The BPF route: loads the committed CO-RE object (bpf/wait_by.bpf.o) with
//! `aya` (pure Rust, no libbpf/libelf/clang at build or run time), attaches
//! its tp_btf programs, and reads the in-kernel aggregates once per
//! interval. The charging rules live in the C program (mirroring
//! [`crate::aggregate`]); this file only moves counters into the model.

use crate::bpf_charges::{CSlot, Charge, ChargeKey, ChargeTotals, NSLOT};
pub use crate::bpf_info::ProgStats;
use crate::bpf_ksym::RqPath;
use crate::bpf_slots::{Slots, TID_LIMIT};
use crate::error::{CollectError, Result};
use crate::route::RouteImpl;
use aya::maps::{Array, HashMap, MapData, PerCpuArray};
use aya::programs::{BtfTracePoint, Program, ProgramError, RawTracePoint};
use aya::{Btf, Ebpf, EbpfLoader, Pod};
use std::collections::{BTreeMap, BTreeSet};
use stealscope_readers::clock::monotonic_ns;
use stealscope_who::hist::{HistPacker, BUCKETS};
use stealscope_who::waits::{Route, SchedSample, SchedStats, ThreadWaits};

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

/// A watched thread's counters (its state between events is a [`VState`]).
#[repr(C)]
#[derive(Clone, Copy)]
struct Victim {
    irq_ns: u64,
    idle_ns: u64,
    unknown_ns: u64,
    count: u64,
    sum_ns: u64,
    max_ns: u64,
    over_1ms: u64,
    over_10ms: u64,
    /// Its first culprits' charges (the rest are in `charges`).
    slots: [CSlot; NSLOT],
    buckets: [u64; BUCKETS],
}

/// A watched thread's state between events, which only the program reads;
/// user space writes it once, when it gives the thread a slot: zero
/// (ST_UNKNOWN, never in step with the kernel) but for the owner's tid.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct VState {
    since: u64,
    ep_kd: u64,
    irq0: u64,
    st_kd: u64,
    acct: u64,
    pcount: u64,
    cpu: u32,
    state: u32,
    tid: u32,
    /// Its index in `vstates` (and in `fast`, when below its size).
    slot: u32,
}

// SAFETY: plain C layouts without padding holes the kernel could leave
// uninitialised in a way Rust cares about (all fields are integers).
unsafe impl Pod for CpuState {}
unsafe impl Pod for Victim {}
unsafe impl Pod for VState {}

const _: () = assert!(std::mem::size_of::<Victim>() == 64 + 48 * NSLOT + 8 * BUCKETS);
const _: () = assert!(std::mem::size_of::<VState>() == 64);

pub(crate) fn bpf_err(what: &str, e: impl std::error::Error) -> CollectError {
    CollectError::Bpf {
        what: what.into(),
        msg: chain(&e),
    }
}

/// A program of the object as its type, or why not.
pub(crate) fn program<'a, T>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> std::result::Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("program {name} missing from the object"))?
        .try_into()
        .map_err(|e: ProgramError| chain(&e))
}

/// An error with its sources, on one line (a verifier log keeps its
/// lines: see `guest_steal::one_line`).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
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
    let (watch, charges) = map_sizes(cpus);
    let mut ebpf = EbpfLoader::new()
        .map_max_entries("rings", cpus)
        .map_max_entries("fast", fast_size(cpus).min(watch))
        .map_max_entries("watched", watch)
        .map_max_entries("vstates", watch)
        .map_max_entries("slots", TID_LIMIT)
        .map_max_entries("charges", charges)
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

/// Threads the `watched` map takes: every vCPU and VMM thread of a large
/// host (128 CPUs at 8 vCPUs each is 1,024 vCPU threads before the
/// emulator's), at least 131,072, and 512 per CPU beyond that. Entries are
/// allocated as threads are watched (BPF_F_NO_PREALLOC), so the size
/// costs only the hash buckets (16 bytes each) until used; their states
/// (`vstates`, 64 bytes each) are preallocated: 8 MiB. `charges` is
/// preallocated (~100 bytes an entry): 512 pairs per CPU, at least 65,536
/// (6 MiB), active in one interval (it is pruned after each read). A
/// full map is counted: `unwatched`, `lost_events`.
fn map_sizes(cpus: u32) -> (u32, u32) {
    let per_cpu = cpus.saturating_mul(512);
    (per_cpu.max(1 << 17), per_cpu.max(1 << 16))
}

/// Victims kept in the preallocated `fast` array rather than the hash (a
/// hash lookup per charged wait was ~15 ns of a switch): 16 threads per
/// CPU, at least 1,024, 2.4 KiB each (2.4 MiB at 1,024).
fn fast_size(cpus: u32) -> u32 {
    cpus.saturating_mul(16).max(1024)
}

/// Refuses kernels before `major.minor`: the maps are allocated at run
/// time, which tracing programs may do safely only since bpf_mem_alloc
/// (6.1; before, the verifier warns that it is unsafe and allows it).
fn require_kernel(major: u32, minor: u32) -> std::result::Result<(), String> {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("/proc/sys/kernel/osrelease: {e}"))?;
    let mut v = rel.trim().split(['.', '-']).map(|x| x.parse::<u32>().ok());
    let (Some(Some(a)), Some(Some(b))) = (v.next(), v.next()) else {
        return Err(format!("kernel release {:?} not understood", rel.trim()));
    };
    if (a, b) < (major, minor) {
        return Err(format!(
            "kernel {a}.{b} is before {major}.{minor} (run-time allocated maps in tracing programs)"
        ));
    }
    Ok(())
}

pub(crate) struct BpfRoute {
    ebpf: Ebpf,
    watched: Slots,
    /// Slots below this keep their victim in `fast`, the rest in the hash.
    fast: u32,
    /// Threads asked for that the map could not take (full).
    unwatched: u64,
    totals: ChargeTotals,
    /// Where each reading's histograms are packed (one thread's each).
    packer: HistPacker,
}

impl BpfRoute {
    /// Loads and attaches everything, or says in one line why not.
    pub(crate) fn start() -> std::result::Result<BpfRoute, String> {
        const BTF: &str = "/sys/kernel/btf/vmlinux";
        if !std::path::Path::new(BTF).exists() {
            return Err(format!("{BTF} missing (kernel built without BTF)"));
        }
        require_kernel(6, 1)?;
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
        let cap = ebpf.map("vstates").expect("map in object");
        let cap = Array::<&MapData, VState>::try_from(cap)
            .map_err(|e| bpf_err("vstates", e).to_string())?
            .len();
        let fast = ebpf.map("fast").expect("map in object");
        let fast = Array::<&MapData, Victim>::try_from(fast)
            .map_err(|e| bpf_err("fast", e).to_string())?
            .len();
        Ok(BpfRoute {
            ebpf,
            watched: Slots::new(cap),
            fast,
            unwatched: 0,
            totals: ChargeTotals::default(),
            packer: HistPacker::default(),
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

    /// Watches `new` threads, each with a slot: its victim zeroed (see
    /// [`BpfRoute::zero_victim`]), then its state, then its `slots` entry,
    /// so that a program finding the slot finds the state and counters.
    /// How many were refused (no slot, or the map full).
    fn insert_victims(&mut self, new: &[u32]) -> Result<u64> {
        let (mut added, mut full) = (Vec::new(), 0);
        for &t in new {
            let slot = match self.watched.pick() {
                Some(s) if t < TID_LIMIT => s,
                picked => {
                    picked.into_iter().for_each(|s| self.watched.unpick(s));
                    full += 1;
                    continue;
                }
            };
            if self.zero_victim(t, slot)? {
                added.push((t, slot));
            } else {
                self.watched.unpick(slot);
                full += 1;
            }
        }
        let map = self.ebpf.map_mut("vstates").expect("map in object");
        let mut states: Array<&mut MapData, VState> =
            Array::try_from(map).map_err(|e| bpf_err("vstates", e))?;
        for &(tid, slot) in &added {
            let st = VState {
                tid,
                slot,
                ..VState::default()
            };
            states.set(slot, st, 0).map_err(|e| bpf_err("vstates", e))?;
        }
        for &(tid, slot) in &added {
            self.set_slot(tid, slot + 1)?;
            self.watched.hold(tid, slot);
        }
        Ok(full)
    }

    /// Thread `tid`'s counters, zeroed, at `slot` in `fast`, or past it in
    /// the hash (BPF_NOEXIST, so a retry never zeroes one already there).
    /// False when the hash is full.
    fn zero_victim(&mut self, tid: u32, slot: u32) -> Result<bool> {
        const BPF_NOEXIST: u64 = 1;
        // SAFETY: Victim is plain integers; all-zero is its start state.
        let zero: Victim = unsafe { std::mem::zeroed() };
        if slot < self.fast {
            let map = self.ebpf.map_mut("fast").expect("map in object");
            let mut fast: Array<&mut MapData, Victim> =
                Array::try_from(map).map_err(|e| bpf_err("fast", e))?;
            fast.set(slot, zero, 0).map_err(|e| bpf_err("fast", e))?;
            return Ok(true);
        }
        let map = self.ebpf.map_mut("watched").expect("map in object");
        let mut victims: HashMap<&mut MapData, u32, Victim> =
            HashMap::try_from(map).map_err(|e| bpf_err("watched", e))?;
        match victims.insert(tid, zero, BPF_NOEXIST) {
            Ok(()) => Ok(true),
            Err(e) => match os_error(&e) {
                Some(libc::EEXIST) => Ok(true),
                Some(libc::E2BIG) | Some(libc::ENOMEM) => Ok(false),
                _ => Err(bpf_err(&format!("watched insert {tid}"), e)),
            },
        }
    }

    /// Hands every watched thread's counters to `each`, one at a time:
    /// from `fast` for the low slots, from the hash for the others. Not
    /// collected first: a victim is 2.4 KB (its histogram), so 10,000 of
    /// them were a 24 MB vector a read, every second in serve (heaptrack
    /// in the soak, 2026-12-07), which the allocator kept as RSS.
    fn each_victim(&self, mut each: impl FnMut(u32, &Victim)) -> Result<()> {
        let map = self.ebpf.map("fast").expect("map in object");
        let fast: Array<&MapData, Victim> = Array::try_from(map).map_err(|e| bpf_err("fast", e))?;
        for (tid, slot) in self.watched.held().filter(|&(_, s)| s < self.fast) {
            let v = fast.get(&slot, 0).map_err(|e| bpf_err("fast read", e))?;
            each(tid, &v);
        }
        for item in self.victims()?.iter() {
            let (tid, v) = item.map_err(|e| bpf_err("watched read", e))?;
            if self.watched.slot(tid).is_some_and(|s| s >= self.fast) {
                each(tid, &v);
            }
        }
        Ok(())
    }

    /// Stops watching `gone`: its `slots` entry first (the program stops
    /// finding it), then its victim (in the hash; one in `fast` is zeroed
    /// when its slot is given again). The slots it held, to be freed once
    /// this change's threads have theirs.
    fn remove_victims(&mut self, gone: &[u32]) -> Result<Vec<u32>> {
        for &t in gone {
            self.set_slot(t, 0)?;
        }
        let map = self.ebpf.map_mut("watched").expect("map in object");
        let mut victims: HashMap<&mut MapData, u32, Victim> =
            HashMap::try_from(map).map_err(|e| bpf_err("watched", e))?;
        for t in gone {
            let _ = victims.remove(t);
        }
        Ok(gone
            .iter()
            .filter_map(|&t| self.watched.release(t))
            .collect())
    }

    /// Sets thread `tid`'s entry in `slots` (its slot + 1, or 0: none).
    fn set_slot(&mut self, tid: u32, value: u32) -> Result<()> {
        let map = self.ebpf.map_mut("slots").expect("map in object");
        let mut slots: Array<&mut MapData, u32> =
            Array::try_from(map).map_err(|e| bpf_err("slots", e))?;
        slots.set(tid, value, 0).map_err(|e| bpf_err("slots", e))
    }

    /// Deletes the `charges` entries `drop` selects.
    fn prune_charges(&mut self, drop: impl Fn(&ChargeKey) -> bool) -> Result<()> {
        let map = self.ebpf.map_mut("charges").expect("map in object");
        let mut charges: HashMap<&mut MapData, ChargeKey, Charge> =
            HashMap::try_from(map).map_err(|e| bpf_err("charges", e))?;
        let doomed: Vec<ChargeKey> = charges
            .keys()
            .filter_map(|k| k.ok())
            .filter(&drop)
            .collect();
        for k in doomed {
            let _ = charges.remove(&k);
        }
        Ok(())
    }

    /// Entries in the `charges` map now (tests of the pruning).
    #[cfg(test)]
    pub(crate) fn charge_entries(&self) -> usize {
        self.charges().map_or(0, |m| m.keys().count())
    }

    fn charges(&self) -> Result<HashMap<&MapData, ChargeKey, Charge>> {
        HashMap::try_from(self.ebpf.map("charges").expect("map in object"))
            .map_err(|e| bpf_err("charges", e))
    }
}

/// The errno under a map error, if it came from a syscall.
fn os_error(e: &aya::maps::MapError) -> Option<i32> {
    match e {
        aya::maps::MapError::SyscallError(s) => s.io_error.raw_os_error(),
        _ => None,
    }
}

/// Adds the privilege hint to permission errors.
pub(crate) fn explain(msg: &str) -> String {
    if msg.contains("Operation not permitted") || msg.contains("os error 1)") {
        format!("{msg} (needs root, or CAP_BPF and CAP_PERFMON)")
    } else {
        msg.to_string()
    }
}

impl RouteImpl for BpfRoute {
    fn route(&self) -> Route {
        Route::Bpf
    }

    /// Watches `tids`: threads that stay keep their counters (inserted
    /// with BPF_NOEXIST, so a retry never zeroes one), threads gone are
    /// removed with their charges. A full map is not an error: the
    /// threads it could not take are counted in `stats.unwatched`.
    fn watch(&mut self, tids: &[u32]) -> Result<()> {
        let want: BTreeSet<u32> = tids.iter().copied().filter(|&t| t != 0).collect();
        let gone: Vec<u32> = self.watched.tids().filter(|t| !want.contains(t)).collect();
        let new: Vec<u32> = want
            .iter()
            .copied()
            .filter(|&t| !self.watched.contains(t))
            .collect();
        let freed = self.remove_victims(&gone)?;
        let full = self.insert_victims(&new)?;
        self.watched.free_later(freed);
        self.prune_charges(|k| gone.contains(&k.victim))?;
        self.totals.forget(&gone);
        self.unwatched = full;
        let map = self.ebpf.map_mut("gate").expect("map in object");
        let mut gate: Array<&mut MapData, u64> =
            Array::try_from(map).map_err(|e| bpf_err("gate", e))?;
        gate.set(0, self.watched.len() as u64, 0)
            .map_err(|e| bpf_err("gate", e))
    }

    fn program_stats(&self) -> Result<Vec<(&'static str, ProgStats)>> {
        self.kernel_prog_stats()
    }

    fn retire_quiet(&mut self, after_ns: u64) {
        self.totals.retire_after = Some(after_ns);
    }

    fn read(&mut self) -> Result<SchedSample> {
        let monotonic_ns = monotonic_ns();
        let mut threads = BTreeMap::new();
        let mut slotted = Vec::new();
        let mut packer = std::mem::take(&mut self.packer);
        let read = self.each_victim(|tid, v| {
            slotted.extend(v.slots.iter().filter_map(|s| s.charge(tid)));
            threads.insert(
                tid,
                ThreadWaits {
                    tid,
                    by_thread: BTreeMap::new(),
                    irq_ns: v.irq_ns,
                    idle_ns: v.idle_ns,
                    unknown_ns: v.unknown_ns,
                    episodes: packer.pack_dense(&v.buckets).totals(
                        v.count,
                        v.sum_ns,
                        v.max_ns,
                        v.over_1ms,
                        v.over_10ms,
                    ),
                },
            );
        });
        self.packer = packer;
        read?;
        let entries: Vec<(ChargeKey, Charge)> = self
            .charges()?
            .iter()
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| bpf_err("charges read", e))?;
        self.totals.fold_slots(&slotted, monotonic_ns);
        let idle = self.totals.fold(&entries, monotonic_ns);
        self.prune_charges(|k| idle.contains(k))?;
        for (tid, t) in threads.iter_mut() {
            t.by_thread = self.totals.of(*tid);
        }
        let cpus: PerCpuArray<&MapData, CpuState> =
            PerCpuArray::try_from(self.ebpf.map("cpus").expect("map in object"))
                .map_err(|e| bpf_err("cpus", e))?;
        let mut stats = SchedStats {
            unwatched: self.unwatched,
            ..SchedStats::default()
        };
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
            procs: BTreeMap::new(),
        })
    }
}

#[cfg(test)]
#[path = "bpf_live_tests.rs"]
mod live_tests;
