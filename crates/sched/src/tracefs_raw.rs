//! The tracefs route: a private tracefs instance (readers' `tracefs`
//! module mounts tracefs on demand and removes the instance on drop) with
//! sched_switch, sched_wakeup, sched_wakeup_new, sched_migrate_task and the
//! hard/soft interrupt entry/exit events, read in binary from every CPU's
//! `per_cpu/cpuN/trace_pipe_raw` and charged in user space by
//! [`crate::aggregate::Aggregator`].
//!
//! - Trace clock `mono` (ktime_get_mono_fast_ns): the same clock as
//!   CLOCK_MONOTONIC, so the reader can tell which events must already be in
//!   the buffers at a time it reads, and samples line up with every other
//!   stealscope counter.
//! - One reader thread polls every CPU's pipe. Poll on trace_pipe_raw
//!   honours `buffer_percent` (kernel 6.1 on), so the thread wakes when a
//!   CPU's buffer is that full, when [`TracefsRoute::read`] asks, or every
//!   `poll_ms`, never per event; each wake-up drains whole pages from every
//!   CPU and merges them by time ([`crate::merge`]).
//! - Losses are counted, never hidden: the missed-events count the kernel
//!   stores on a page after an overrun, and each CPU's `stats` (`overrun`,
//!   `dropped events`), whichever is larger; a CPU that lost events charges
//!   `unknown` until its next switch.
//!
//! Hand-written because no maintained crate reads trace_pipe_raw: on
//! crates.io `ktracepoint` implements tracepoints for other kernels, `ftrace`
//! traces file accesses; the readers of this format are C (libtraceevent's
//! kbuffer, trace-cmd), which would add a system library and FFI for ~300
//! lines of format-driven decoding ([`crate::ringbuf`], [`crate::evformat`]).

use crate::aggregate::{Aggregator, Event};
use crate::error::{CollectError, Result};
use crate::evformat::{Decoder, EventFormat};
use crate::merge::Merger;
use crate::ringbuf::{Missed, PageFormat};
use crate::route::RouteImpl;
use crate::tracefs_text::read_text;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use stealscope_readers::clock::monotonic_ns;
use stealscope_readers::tracefs::Instance;
use stealscope_readers::{process, RootFs};
use stealscope_who::hist::HistPacker;
use stealscope_who::waits::{Route, SchedSample, SchedStats};

/// Prefix of the instance name (`<prefix><pid>-<n>`).
pub const INSTANCE_PREFIX: &str = "stealscope-sched-";

/// Events stamped this long before a drain began are taken as all in: a
/// writer on another CPU may still be committing one it stamped earlier.
const COMMIT_MARGIN_NS: u64 = 2_000_000;

/// Nice value of the reader thread.
const READER_NICE: i32 = -20;

const REQUIRED: [&str; 4] = [
    "sched/sched_switch",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
    "sched/sched_migrate_task",
];
const IRQ: [&str; 4] = [
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
];

#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Ring buffer per CPU.
    pub buffer_kb: u32,
    /// How full a CPU's buffer gets before the reader wakes.
    pub buffer_percent: u32,
    /// The reader drains at least this often.
    pub poll_ms: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            buffer_kb: 4096,
            buffer_percent: 25,
            poll_ms: 250,
        }
    }
}

#[derive(Default)]
struct State {
    /// Requests to drain, and the last one a drain has answered.
    asked: u64,
    answered: u64,
    stop: bool,
    /// Missed-event counts the kernel stored on pages, per CPU index.
    missed: Vec<u64>,
    /// Events dropped by the merge for arriving too late.
    late: u64,
    /// Pages that could not be decoded (each counted lost).
    bad_pages: u64,
    last_error: Option<String>,
}

struct Shared {
    agg: Mutex<Aggregator>,
    state: Mutex<State>,
    answered: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running tracefs route. Drop stops the reader and removes the instance.
pub struct TracefsRoute {
    shared: Arc<Shared>,
    wake: Arc<OwnedFd>,
    reader: Option<std::thread::JoinHandle<()>>,
    cpus: Vec<u32>,
    /// Where each reading's histograms are packed.
    packer: HistPacker,
    // Last: removed after the reader closed its pipes.
    instance: Instance,
}

/// Starts the route with default options (for [`crate::Collector`]).
pub(crate) fn start() -> std::result::Result<Box<dyn RouteImpl>, String> {
    Ok(Box::new(TracefsRoute::start(Options::default())?))
}

/// `events/<name>` of the instance, else of the tracefs root (older kernels
/// keep header_page and format files only there).
fn events_file(inst: &Path, rel: &str) -> PathBuf {
    let p = inst.join("events").join(rel);
    if p.exists() {
        return p;
    }
    inst.ancestors()
        .nth(2)
        .map(|root| root.join("events").join(rel))
        .unwrap_or(p)
}

impl TracefsRoute {
    pub fn start(opts: Options) -> std::result::Result<TracefsRoute, String> {
        let instance = Instance::create(INSTANCE_PREFIX, true)?;
        let dir = instance.path().to_path_buf();
        instance
            .write("trace_clock", "mono")
            .map_err(|e| format!("trace clock mono unavailable: {e}"))?;
        instance.write("buffer_size_kb", &opts.buffer_kb.to_string())?;
        instance.write("buffer_percent", &opts.buffer_percent.to_string())?;
        let page = PageFormat::parse(
            &read_text(&events_file(&dir, "header_page"))?,
            &read_text(&events_file(&dir, "header_event"))?,
        )?;
        let mut others = Vec::new();
        let mut switch = None;
        for ev in REQUIRED.iter().chain(IRQ.iter()) {
            if !instance.has_event(ev) {
                if REQUIRED.contains(ev) {
                    return Err(format!("this kernel has no {ev} tracepoint"));
                }
                // Interrupt time is then charged to the task it interrupted.
                continue;
            }
            let f = EventFormat::load(&events_file(&dir, ev))?;
            instance.write(&format!("events/{ev}/enable"), "1")?;
            if f.name == "sched_switch" {
                switch = Some(f);
            } else {
                others.push(f);
            }
        }
        let decoder = Decoder::new(switch.as_ref().ok_or("no sched_switch")?, &others)?;
        let mut pipes = Vec::new();
        let per_cpu = dir.join("per_cpu");
        let entries =
            std::fs::read_dir(&per_cpu).map_err(|e| format!("{}: {e}", per_cpu.display()))?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(cpu) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let p = e.path().join("trace_pipe_raw");
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&p)
                .map_err(|e| format!("{}: {e}", p.display()))?;
            pipes.push((cpu, f));
        }
        pipes.sort_by_key(|(c, _)| *c);
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let subbuf = std::fs::read_to_string(dir.join("buffer_subbuf_size_kb"))
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map_or(0, |kb| kb * 1024);
        let page_size = page.page_size;
        let reader = Reader {
            cpus: pipes,
            page,
            page_len: subbuf.max(page_size),
            decoder,
            poll_ms: opts.poll_ms,
            start: monotonic_ns(),
        };
        instance.write("tracing_on", "1")?;
        let shared = Arc::new(Shared {
            agg: Mutex::new(Aggregator::new()),
            state: Mutex::new(State::default()),
            answered: Condvar::new(),
        });
        let cpus = reader.cpus.iter().map(|(c, _)| *c).collect();
        let (s, w) = (shared.clone(), wake.clone());
        let handle =
            stealscope_readers::own_threads::spawn("sched-tracefs", move || reader.run(&s, &w))
                .map_err(|e| format!("reader thread: {e}"))?;
        Ok(TracefsRoute {
            shared,
            wake,
            reader: Some(handle),
            cpus,
            packer: HistPacker::default(),
            instance,
        })
    }

    /// The instance directory (tests read its per-CPU stats themselves).
    pub fn instance_dir(&self) -> &Path {
        self.instance.path()
    }

    pub fn watch(&mut self, tids: &[u32]) {
        lock(&self.shared.agg).watch(tids);
    }

    /// Drains every CPU and returns the cumulative counters. Two drains a
    /// commit margin apart: the second applies the first's schedstat
    /// reading ([`Aggregator::reconcile`]).
    pub fn read(&mut self) -> Result<SchedSample> {
        self.drain()?;
        std::thread::sleep(Duration::from_nanos(COMMIT_MARGIN_NS + 500_000));
        self.drain()?;
        let lost = self.lost()?;
        let mut agg = lock(&self.shared.agg);
        let sample = SchedSample {
            route: Route::Tracefs,
            monotonic_ns: monotonic_ns(),
            threads: agg.waits(&mut self.packer),
            stats: SchedStats {
                events: agg.events(),
                lost_events: lost,
                overflows: 0,
                missed_switches: agg.missed_switches(),
                unwatched: 0,
            },
            procs: Default::default(),
        };
        // A culprit's tid may be reused by the next interval.
        agg.forget_identities();
        Ok(sample)
    }

    /// Asks the reader for a drain and waits for it.
    fn drain(&mut self) -> Result<()> {
        let asked = {
            let mut s = lock(&self.shared.state);
            s.asked += 1;
            s.asked
        };
        poke(&self.wake);
        let mut s = lock(&self.shared.state);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while s.answered < asked {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(CollectError::Io {
                    path: self.instance.path().display().to_string(),
                    source: std::io::Error::new(
                        ErrorKind::TimedOut,
                        s.last_error
                            .clone()
                            .unwrap_or("reader did not answer in 5 s".into()),
                    ),
                });
            }
            s = self
                .shared
                .answered
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }

    /// Events lost so far: the reader's own count and the kernel's.
    fn lost(&self) -> Result<u64> {
        let s = lock(&self.shared.state);
        let mut lost = s.late + s.bad_pages;
        for (i, &cpu) in self.cpus.iter().enumerate() {
            let kernel = self.kernel_lost(cpu)?;
            lost += kernel.max(s.missed.get(i).copied().unwrap_or(0));
        }
        Ok(lost)
    }

    /// `overrun` plus `dropped events` of a CPU's stats file.
    fn kernel_lost(&self, cpu: u32) -> Result<u64> {
        let p = self.instance.path().join(format!("per_cpu/cpu{cpu}/stats"));
        let text = std::fs::read_to_string(&p).map_err(|source| CollectError::Io {
            path: p.display().to_string(),
            source,
        })?;
        Ok(stats_lost(&text))
    }
}

/// schedstat `run_delay` of each thread still there.
fn run_delays(tids: &[u32]) -> Vec<(u32, u64)> {
    let live = RootFs::live();
    tids.iter()
        .filter_map(|&tid| {
            let s = process::thread_schedstat(&live, tid).ok()??;
            Some((tid, s.wait_ns))
        })
        .collect()
}

/// `overrun: N` plus `dropped events: N` of a per-CPU stats file.
pub fn stats_lost(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "overrun" | "dropped events")
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

fn poke(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a valid buffer to our eventfd.
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
}

impl Drop for TracefsRoute {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        poke(&self.wake);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

impl RouteImpl for TracefsRoute {
    fn route(&self) -> Route {
        Route::Tracefs
    }

    fn watch(&mut self, tids: &[u32]) -> Result<()> {
        TracefsRoute::watch(self, tids);
        Ok(())
    }

    fn read(&mut self) -> Result<SchedSample> {
        TracefsRoute::read(self)
    }
}

/// The reader's state across drains: events waiting to be merged in time
/// order, each CPU's last event time and missed count, and the schedstat
/// marks to reconcile with.
struct Drain {
    merger: Merger,
    last_ts: Vec<u64>,
    missed: Vec<u64>,
    bad_pages: u64,
    last_error: Option<String>,
    buf: Vec<u8>,
    /// (time, run_delay per watched thread) read at each drain, applied
    /// once the events up to that time are.
    marks: VecDeque<(u64, Vec<(u32, u64)>)>,
}

impl Drain {
    /// Reads CPU `cpu`'s (index `i`) pages until it has none, bounded so a
    /// CPU writing as fast as we read cannot keep the others waiting.
    fn drain_cpu(&mut self, i: usize, cpu: u32, pipe: &mut File, page: &PageFormat, dec: &Decoder) {
        for _ in 0..4096 {
            let n = match pipe.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.last_error = Some(format!("cpu{cpu}/trace_pipe_raw: {e}"));
                    break;
                }
            };
            let mut events = Vec::new();
            let r = page.decode(&self.buf[..n], |ts, data| {
                if let Some(ev) = dec.decode(cpu, ts, data) {
                    events.push(ev);
                }
            });
            let lost = Event::Lost {
                cpu,
                ts: self.last_ts[i],
            };
            match r {
                Ok(Missed::None) => {}
                Ok(m) => {
                    self.missed[i] += match m {
                        Missed::Count(c) => c,
                        _ => 1,
                    };
                    self.merger.push(i, lost);
                }
                Err(e) => {
                    self.bad_pages += 1;
                    self.last_error = Some(format!("cpu{cpu}/trace_pipe_raw: {e}"));
                    self.merger.push(i, lost);
                    continue;
                }
            }
            if let Some(e) = events.last() {
                self.last_ts[i] = e.ts();
            }
            for e in events {
                self.merger.push(i, e);
            }
        }
    }

    /// Applies every event up to the drain at `t0` less the commit margin,
    /// reconciling with each schedstat mark on the way.
    fn commit(&mut self, shared: &Shared, t0: u64) {
        let wm = t0.saturating_sub(COMMIT_MARGIN_NS);
        let mut agg = lock(&shared.agg);
        while self.marks.front().is_some_and(|m| m.0 <= wm) {
            let (ts, delays) = self.marks.pop_front().unwrap_or_default();
            self.merger.release(ts, |e| agg.apply(e));
            agg.reconcile(ts, &delays);
        }
        self.merger.release(wm, |e| agg.apply(e));
        agg.advance(wm);
    }

    /// Publishes the counters and answers the read that was asked for.
    fn publish(&self, shared: &Shared, asked: u64) {
        let mut s = lock(&shared.state);
        s.missed.clone_from(&self.missed);
        s.late = self.merger.late;
        s.bad_pages = self.bad_pages;
        s.last_error.clone_from(&self.last_error);
        s.answered = asked;
        shared.answered.notify_all();
    }
}

struct Reader {
    cpus: Vec<(u32, File)>,
    page: PageFormat,
    page_len: usize,
    decoder: Decoder,
    poll_ms: u32,
    start: u64,
}

impl Reader {
    fn run(mut self, shared: &Shared, wake: &OwnedFd) {
        // The CPUs are busiest exactly when stolen time matters: at nice 0
        // beside nice -20 vCPUs the reader got 0.6 % of a CPU and drained
        // 711 pages in 11.7 s. It sleeps between drains, so the priority
        // costs only the drains themselves.
        // SAFETY: plain syscalls on this thread's own id.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as u32, READER_NICE) };
        let mut d = Drain {
            merger: Merger::default(),
            last_ts: vec![self.start; self.cpus.len()],
            missed: vec![0u64; self.cpus.len()],
            bad_pages: 0,
            last_error: None,
            buf: vec![0u8; self.page_len],
            marks: VecDeque::new(),
        };
        loop {
            self.wait(wake);
            let asked = {
                let s = lock(&shared.state);
                if s.stop {
                    return;
                }
                s.asked
            };
            // schedstat first, then the clock: what run_delay holds was
            // stamped in the trace before t0.
            let watched = lock(&shared.agg).watched();
            let delays = run_delays(&watched);
            let t0 = monotonic_ns();
            d.marks.push_back((t0, delays));
            for (i, (cpu, pipe)) in self.cpus.iter_mut().enumerate() {
                d.drain_cpu(i, *cpu, pipe, &self.page, &self.decoder);
            }
            d.commit(shared, t0);
            d.publish(shared, asked);
        }
    }
    /// Until a CPU's buffer reaches buffer_percent, a read is asked for, or
    /// poll_ms pass.
    fn wait(&self, wake: &OwnedFd) {
        let mut fds: Vec<libc::pollfd> = self
            .cpus
            .iter()
            .map(|(_, f)| libc::pollfd {
                fd: f.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        fds.push(libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: fds is a valid array of pollfd for the call's duration.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                self.poll_ms as i32,
            )
        };
        let mut v = [0u8; 8];
        // SAFETY: reads up to 8 bytes into v (clears the eventfd).
        unsafe { libc::read(wake.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stats_lost_adds_overrun_and_dropped() {
        let text = "entries: 5\noverrun: 12\ncommit overrun: 3\nbytes: 9\n\
                    oldest event ts:  1.0\nnow ts:  2.0\ndropped events: 4\nread events: 7\n";
        assert_eq!(super::stats_lost(text), 16);
    }
}
