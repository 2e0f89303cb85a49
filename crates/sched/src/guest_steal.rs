//! Exact steal inside a KVM guest (issue 30): loads the committed CO-RE
//! object bpf/guest_steal.bpf.o with `aya` (no clang or libbpf at build or
//! run time), attaches it to `sched_switch` and to the tick ([`TickHook`]:
//! fentry on `account_steal_time`, else `hrtimer_expire_exit`), and
//! reads what it aggregated: per CPU busy and idle steal with an episode
//! histogram, busy steal by task, and the episodes over a threshold from
//! its ring buffer, which user space drains at each read (the program
//! never wakes it). The rule is [`crate::guest_steal_fold`]; this file only
//! moves counters into [`GuestStealSample`].

use crate::bpf::{bpf_err, chain, explain, program};
use crate::bpf_info::ProgStats;
use crate::bpf_ksym::RqPath;
use crate::error::Result;
use crate::guest_steal_ring::{EpisodeLog, RECENT};
use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, FEntry};
use aya::{Btf, Ebpf, EbpfLoader, Pod};
use stealscope_readers::clock::monotonic_ns;
use stealscope_who::guest_steal::{
    CpuSteal, GuestStealSample, StealEpisode, StealTaskId, TaskSteal,
};
use stealscope_who::hist::{EpisodeHist, BUCKETS};

static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/guest_steal.bpf.o");

/// The switch's program and its tracepoint (why these hooks and no others:
/// the comments on them in bpf/guest_steal.bpf.c).
const SWITCH: (&str, &str) = ("steal_switch", "sched_switch");

/// How the collector sees steal at the tick (between a busy task's
/// switches), best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickHook {
    /// fentry on `account_steal_time`, which the tick (and nohz idle exit)
    /// calls with the steal accrued: a tick without steal costs one load.
    AccountSteal,
    /// After the tick's hrtimer callback (its address from /proc/kallsyms).
    TickTimer,
    /// After every hrtimer (the tick's callback not found).
    EveryHrtimer,
}

impl TickHook {
    /// The program that serves this hook.
    pub fn program(self) -> &'static str {
        match self {
            TickHook::AccountSteal => "steal_account",
            TickHook::TickTimer | TickHook::EveryHrtimer => "steal_tick",
        }
    }

    /// What it attaches to, as a person reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            TickHook::AccountSteal => "fentry account_steal_time",
            TickHook::TickTimer => "hrtimer_expire_exit (tick only)",
            TickHook::EveryHrtimer => "hrtimer_expire_exit (every hrtimer)",
        }
    }
}

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

// Layouts shared with bpf/guest_steal.bpf.c (same field order and sizes).
#[repr(C)]
#[derive(Clone, Copy)]
struct RawCpu {
    primed: u64,
    last: u64,
    runs: u64,
    busy_ns: u64,
    idle_ns: u64,
    busy_count: u64,
    idle_count: u64,
    max_ns: u64,
    over_1ms: u64,
    over_10ms: u64,
    ring_lost: u64,
    buckets: [u64; BUCKETS],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RawTaskKey {
    tid: u32,
    pad: u32,
    tstart: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RawTask {
    ns: u64,
    count: u64,
    tgid: u32,
    pad: u32,
    comm: [u8; 16],
}

// SAFETY: plain C layouts of integers and byte arrays, no padding holes.
unsafe impl Pod for RawCpu {}
unsafe impl Pod for RawTaskKey {}
unsafe impl Pod for RawTask {}

const _: () = assert!(std::mem::size_of::<RawCpu>() == 88 + 8 * BUCKETS);
const _: () = assert!(std::mem::size_of::<RawTask>() == 40);

/// How the collector runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StealOptions {
    /// Episodes at or over this many ns are listed one by one (the ring);
    /// every episode is in the histograms and totals whatever its size.
    pub threshold_ns: u64,
}

impl Default for StealOptions {
    fn default() -> Self {
        StealOptions {
            threshold_ns: 100_000,
        }
    }
}

/// The collector cannot run here; `reason` is one line naming what failed,
/// e.g. `/sys/kernel/btf/vmlinux missing (kernel built without BTF)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no exact guest steal: {reason}")]
pub struct StealUnavailable {
    pub reason: String,
}

/// A running guest steal collector. Dropping it detaches the programs.
pub struct GuestSteal {
    ebpf: Ebpf,
    ring: RingBuf<aya::maps::MapData>,
    log: EpisodeLog,
    threshold_ns: u64,
    rq_path: RqPath,
    tick: TickHook,
    /// Why fentry was not used, when it was not.
    fentry_refused: Option<String>,
}

/// A verifier log on one line: its first line and its last but the
/// statistics (the verdict).
fn one_line(msg: &str) -> String {
    let mut lines: Vec<&str> = msg
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    while lines.len() > 1 && lines.last().is_some_and(|l| l.starts_with("processed ")) {
        lines.pop();
    }
    let line = match lines.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        [first, .., last] => format!("{first} ... {last}"),
    };
    // A refusal before verification leaves the log empty.
    line.trim_end_matches(" Verifier output:").to_string()
}

/// Why this kernel has no steal clock the program can read, if so: its
/// BTF names neither `rq` field (a kernel without CONFIG_PARAVIRT).
fn steal_fields_missing(btf_bytes: &[u8]) -> Option<String> {
    let has = |name: &[u8]| btf_bytes.windows(name.len()).any(|w| w == name);
    if has(b"\0prev_steal_time_rq\0") || has(b"\0prev_steal_time\0") {
        return None;
    }
    Some(format!(
        "{BTF_PATH} names no rq.prev_steal_time(_rq) (kernel without CONFIG_PARAVIRT: no paravirt steal clock)"
    ))
}

/// The object loaded with the run queue reached by `path`, the switch's
/// program and a tick program attached (fentry where the kernel takes it,
/// else the hrtimer one, with fentry's refusal), or why not.
fn load_attach(
    btf: &Btf,
    path: RqPath,
    opts: StealOptions,
    tick_fn: Option<u64>,
) -> std::result::Result<(Ebpf, TickHook, Option<String>), String> {
    let object = crate::bpf_ksym::resolve_runqueues(OBJECT, btf, path)?;
    let object = crate::bpf_ksym::as_bytes(&object, OBJECT.len());
    let mut ebpf = EbpfLoader::new()
        .override_global("episode_threshold_ns", &opts.threshold_ns, true)
        .override_global("tick_fn", &tick_fn.unwrap_or(0), true)
        .load(object)
        .map_err(|e| explain(&one_line(&chain(&e))))?;
    let (name, tp) = SWITCH;
    attach_tp(&mut ebpf, btf, name, tp)?;
    let refused = match attach_fentry(&mut ebpf, btf) {
        Ok(()) => return Ok((ebpf, TickHook::AccountSteal, None)),
        Err(why) => why,
    };
    let tick = match tick_fn {
        Some(_) => TickHook::TickTimer,
        None => TickHook::EveryHrtimer,
    };
    attach_tp(&mut ebpf, btf, tick.program(), "hrtimer_expire_exit")?;
    Ok((ebpf, tick, Some(refused)))
}

/// A `tp_btf` program loaded and attached to tracepoint `tp`, or why not
/// (a refusal to load starts with "loading ").
fn attach_tp(ebpf: &mut Ebpf, btf: &Btf, name: &str, tp: &str) -> std::result::Result<(), String> {
    let prog: &mut BtfTracePoint = program(ebpf, name)?;
    prog.load(tp, btf)
        .map_err(|e| explain(&format!("loading {name}: {}", one_line(&chain(&e)))))?;
    prog.attach()
        .map_err(|e| explain(&format!("attaching {name} to {tp}: {}", chain(&e))))?;
    Ok(())
}

/// fentry on `account_steal_time`, or why not (a kernel without BPF
/// trampolines or one that refuses them, as this project's test machine
/// does with EPERM; or the function inlined or renamed).
fn attach_fentry(ebpf: &mut Ebpf, btf: &Btf) -> std::result::Result<(), String> {
    let name = TickHook::AccountSteal.program();
    let prog: &mut FEntry = program(ebpf, name)?;
    prog.load("account_steal_time", btf)
        .map_err(|e| format!("loading {name}: {}", one_line(&chain(&e))))?;
    prog.attach()
        .map_err(|e| format!("attaching {name}: {}", chain(&e)))?;
    Ok(())
}

impl GuestSteal {
    /// Loads and attaches the programs, or says in one line why not.
    pub fn start(opts: StealOptions) -> std::result::Result<GuestSteal, StealUnavailable> {
        let unavailable = |reason: String| StealUnavailable { reason };
        let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        let cpuid = stealscope_readers::cpuid::decode(&stealscope_readers::cpuid::read_live());
        if let Some(why) = crate::guest_steal_clock::steal_clock_missing(&cpuid, &cmdline) {
            return Err(unavailable(why));
        }
        let bytes = std::fs::read(BTF_PATH).map_err(|e| {
            unavailable(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("{BTF_PATH} missing (kernel built without BTF)")
                }
                _ => format!("{BTF_PATH}: {e}"),
            })
        })?;
        if let Some(why) = steal_fields_missing(&bytes) {
            return Err(unavailable(why));
        }
        // aya parses the file itself (its parser wants the `object`
        // crate's endianness type, not a dependency here): read twice.
        drop(bytes);
        let btf =
            Btf::from_sys_fs().map_err(|e| unavailable(format!("{BTF_PATH}: {}", chain(&e))))?;
        // The tick's hrtimer callback (6.9 renamed it), so that other
        // hrtimers cost the program one load; unknown: every one reads.
        let tick_fn = crate::bpf_ksym::text_symbol(&["tick_nohz_handler", "tick_sched_timer"]);
        // As in the scheduler route (src/bpf.rs): the other rq path only
        // when the verifier refused this one, both reasons kept.
        let mut why = Vec::new();
        for path in [RqPath::CfsRq, RqPath::Runqueues] {
            match load_attach(&btf, path, opts, tick_fn) {
                Ok((ebpf, tick, refused)) => {
                    return GuestSteal::with(ebpf, path, opts, tick, refused).map_err(unavailable)
                }
                Err(e) if e.starts_with("loading ") => why.push(format!("{}: {e}", path.as_str())),
                Err(e) => return Err(unavailable(e)),
            }
        }
        Err(unavailable(why.join("; ")))
    }

    fn with(
        mut ebpf: Ebpf,
        rq_path: RqPath,
        opts: StealOptions,
        tick: TickHook,
        fentry_refused: Option<String>,
    ) -> std::result::Result<Self, String> {
        let map = ebpf
            .take_map("steal_episodes")
            .ok_or("map steal_episodes missing from the object")?;
        let ring = RingBuf::try_from(map).map_err(|e| format!("steal_episodes: {}", chain(&e)))?;
        Ok(GuestSteal {
            ebpf,
            ring,
            log: EpisodeLog::new(RECENT),
            threshold_ns: opts.threshold_ns,
            rq_path,
            tick,
            fentry_refused,
        })
    }

    /// How the program reaches the run queue on this kernel.
    pub fn rq_path(&self) -> &'static str {
        self.rq_path.as_str()
    }

    /// How steal is seen at the tick on this kernel.
    pub fn tick_hook(&self) -> TickHook {
        self.tick
    }

    /// Why the fentry tick hook was not used, when it was not (one line).
    pub fn fentry_refused(&self) -> Option<&str> {
        self.fentry_refused.as_deref()
    }

    /// Moves the episodes waiting in the kernel's ring into the recent
    /// list; how many. [`GuestSteal::read`] does it too; a caller that
    /// reads rarely calls this on its own schedule (the ring holds 4,096
    /// episodes; what does not fit is counted in `ring_lost`).
    pub fn drain(&mut self) -> usize {
        self.drain_into(None)
    }

    /// [`GuestSteal::drain`], each episode also copied to `out` (a caller
    /// that keeps every one, as `record` does).
    pub fn drain_into(&mut self, mut out: Option<&mut Vec<StealEpisode>>) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            let e = self.log.push(&item);
            if let (Some(out), Some(e)) = (out.as_deref_mut(), e) {
                out.push(e.clone());
            }
            n += 1;
        }
        n
    }

    /// Cumulative counters since the start, and the recent episodes.
    pub fn read(&mut self) -> Result<GuestStealSample> {
        self.read_into(None)
    }

    /// [`GuestSteal::read`], the episodes it drains also copied to `out`.
    /// The sample's time is taken before the counters are read: an
    /// episode seen before it is in them, one seen after is not.
    pub fn read_into(&mut self, out: Option<&mut Vec<StealEpisode>>) -> Result<GuestStealSample> {
        let t = monotonic_ns();
        // Tasks first: steal charged between the two reads (a reader
        // preempted for milliseconds under load) is then in the CPUs'
        // totals and not yet in a task's, so within a sample a task's
        // steal never exceeds its CPU's. Between two samples the first's
        // gap can still move a task's difference over its CPU's by what
        // accrued while it was read.
        let tasks = self.read_tasks()?;
        let cpus = self.read_cpus()?;
        self.drain_into(out);
        Ok(GuestStealSample {
            monotonic_ns: t,
            threshold_ns: self.threshold_ns,
            cpus,
            tasks,
            episodes: self.log.recent().cloned().collect(),
            episodes_seen: self.log.seen(),
        })
    }

    /// The per-CPU counters alone: one map read, cheap enough for every
    /// sample of a live view (the tasks' walk is not).
    pub fn read_cpus(&self) -> Result<Vec<CpuSteal>> {
        let map = self.ebpf.map("steal_cpus").expect("map in object");
        let cpus: PerCpuArray<&MapData, RawCpu> =
            PerCpuArray::try_from(map).map_err(|e| bpf_err("steal_cpus", e))?;
        let values = cpus.get(&0, 0).map_err(|e| bpf_err("steal_cpus read", e))?;
        Ok(values
            .iter()
            .enumerate()
            .map(|(cpu, c)| cpu_steal(cpu as u32, c))
            .collect())
    }

    fn read_tasks(&self) -> Result<Vec<TaskSteal>> {
        let map = self.ebpf.map("steal_tasks").expect("map in object");
        let tasks: HashMap<&MapData, RawTaskKey, RawTask> =
            HashMap::try_from(map).map_err(|e| bpf_err("steal_tasks", e))?;
        // The program may evict an entry (LRU) while this walks the map:
        // its lookup then fails (skipped: it was charged least recently)
        // and the kernel restarts the walk from the first key (entries
        // seen twice are kept once; at most two walks of the 8,192).
        let mut seen = std::collections::HashSet::new();
        let mut v: Vec<TaskSteal> = tasks
            .iter()
            .take(2 * 8192)
            .filter_map(|item| item.ok())
            .filter(|(k, _)| seen.insert((k.tid, k.tstart)))
            .map(|(k, t)| task_steal(&k, &t))
            .collect();
        stealscope_who::guest_steal::sort_tasks(&mut v);
        Ok(v)
    }

    /// The kernel's counters of each program (`bpf_prog_info`; run count
    /// and time only with `kernel.bpf_stats_enabled`).
    pub fn program_stats(&self) -> Result<Vec<(&'static str, ProgStats)>> {
        [SWITCH.0, self.tick.program()]
            .iter()
            .map(|name| {
                let prog = self.ebpf.program(name).expect("program in object");
                let fd = prog.fd().map_err(|e| bpf_err(name, e))?;
                let st = crate::bpf_info::prog_stats(fd).map_err(|e| bpf_err(name, e))?;
                Ok((*name, st))
            })
            .collect()
    }
}

fn cpu_steal(cpu: u32, c: &RawCpu) -> CpuSteal {
    let count = c.busy_count + c.idle_count;
    CpuSteal {
        cpu,
        busy_ns: c.busy_ns,
        idle_ns: c.idle_ns,
        busy_episodes: c.busy_count,
        idle_episodes: c.idle_count,
        episodes: EpisodeHist::with_buckets(c.buckets.iter().copied().enumerate()).totals(
            count,
            c.busy_ns + c.idle_ns,
            c.max_ns,
            c.over_1ms,
            c.over_10ms,
        ),
        steal_clock_ns: c.last,
        hook_runs: c.runs,
        ring_lost: c.ring_lost,
    }
}

fn task_steal(k: &RawTaskKey, t: &RawTask) -> TaskSteal {
    let end = t.comm.iter().position(|&c| c == 0).unwrap_or(t.comm.len());
    TaskSteal {
        task: StealTaskId {
            tid: k.tid,
            tgid: t.tgid,
            start_ns: k.tstart,
            comm: String::from_utf8_lossy(&t.comm[..end]).into_owned(),
        },
        busy_ns: t.ns,
        episodes: t.count,
    }
}

#[cfg(test)]
#[path = "guest_steal_tests.rs"]
mod tests;
