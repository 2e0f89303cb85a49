//! Live capture of one interval into a [`Snapshot`]: every file the rules
//! read at the start (t0) and end (t1), plus the engine's /proc/stat series
//! in between ([`Sampler`], with the per-CPU hardware counters read with
//! each sample), and CPUID. `doctor` analyses this in-memory snapshot with
//! the same code that reads a snapshot from disk, so live and offline
//! reports cannot drift apart.

use crate::exact_steal_hook::{self, ExactStealHook};
use crate::host::answers::{self as live, HostLiveOptions};
use crate::host::sched_hook::{self, SchedHook};
use crate::host::starve::{self, StarveWatch};
use crate::hw_sampler::is_live_root;
use crate::sampler::{CounterReads, Ended, Sample, Sampler, SamplerOptions, Subscriber};
use crate::series::{self, Series};
use crate::stop::{Rate, Wait};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stealscope_model::host::starve::{OwnWait, STARVE_FILE};
use stealscope_model::host::stored::READ_TIMES;
use stealscope_model::observation::{collect, Observation, Side};
use stealscope_readers::own_threads;
use stealscope_readers::perf::CounterCapture;
use stealscope_readers::rule_records::RuleRecords;
use stealscope_readers::snapshot::{Hardware, Meta, RawSample, Snapshot, FORMAT};
use stealscope_readers::{cpuid, MemFs, ReadError, Recorder, RootFs, Source};

#[derive(Debug, Clone)]
pub struct CaptureOptions {
    pub root: PathBuf,
    pub interval: Duration,
    /// Rate of the /proc/stat series; 0 disables it.
    pub sample_hz: f64,
}

pub use stealscope_readers::clock::monotonic_ns;

/// Reads a side through a recorder and keeps the bytes as a snapshot side.
pub fn record_side(
    root: &std::path::Path,
    name: &str,
    side: Side,
) -> Result<(MemFs, Observation), ReadError> {
    // The rules read a few kernel messages; the rest stays on this machine
    // and is neither kept nor parsed.
    let rec = Recorder::new(RuleRecords(RootFs::new(root)));
    let obs = collect(&rec, side)?;
    // The hostname is not a rule input, but meta.json records it.
    let _ = rec.read("/proc/sys/kernel/hostname");
    let mut fs = MemFs::new(name);
    fs.files = rec.into_files();
    // When each process was read: a saved snapshot times each as live.
    if !obs.host.read_ns.is_empty() {
        fs.insert(
            READ_TIMES,
            serde_json::to_vec(&obs.host.read_ns).unwrap_or_default(),
        );
    }
    Ok((fs, obs))
}

/// One interval of a live capture: the files the rules read at its start,
/// then (in [`IntervalCapture::finish`]) at its end, with the /proc/stat
/// series and counter readings the engine's sampler took meanwhile, CPUID
/// and, on a live host, QMP and KVM statistics at both ends and a
/// kvm:kvm_exit sample inside. [`capture`] runs one; the rule runner
/// (serve, top) one after another to evaluate the rules periodically.
pub struct IntervalCapture {
    root: std::path::PathBuf,
    t0: MemFs,
    start: Instant,
    taken_unix_s: Option<f64>,
    sample_hz: f64,
    host: HostLiveOptions,
    ask_live: bool,
    exit_thread: Option<std::thread::JoinHandle<stealscope_readers::kvm_exits::ExitSample>>,
    sched: Option<SchedHook>,
    /// The start side's other processes, to find the largest host work
    /// whose affinity t1 records (empty unless asking a live host).
    procs0: Vec<stealscope_model::host::observation::HostProc>,
    /// Open waits of every thread during the interval (live root only).
    starve: Option<StarveWatch>,
    /// Before t0 was read, with this process's (run, wait) ns then.
    begun: (Instant, (u64, u64)),
    /// The interval the caller asked for, to say when it overran.
    asked: Option<Duration>,
    /// A live root under a hypervisor, running no VM: exact guest steal
    /// can be read without disturbing what a host capture measures.
    live_guest: bool,
    /// Exact guest steal ([`IntervalCapture::with_exact_steal`]).
    exact: Option<ExactStealHook>,
}

impl IntervalCapture {
    /// Reads the start side; `sample_hz` is the rate of the series the
    /// caller's sampler takes (0: none), for the snapshot's meta.
    pub fn start(
        root: &std::path::Path,
        sample_hz: f64,
        host: &HostLiveOptions,
    ) -> Result<Self, ReadError> {
        let taken_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .ok();
        let live_root = is_live_root(root);
        let begun = (Instant::now(), starve::own_times(root));
        // Scans from before t0 on, so that a wait open at t0 is seen.
        let starve = live_root.then(|| StarveWatch::start(root).ok()).flatten();
        // Loaded before t0, so that its start-up is outside the interval.
        let mut sched =
            (live_root && host.attribution && sched_hook::vmm_running(root)).then(SchedHook::load);
        let (mut t0, obs0) = record_side(root, "live t0", Side::Start)?;
        // Not beside VMs: the loader's CPU would be in the vCPUs' steal.
        let live_guest = live_root && is_guest(&obs0) && obs0.host.vms.is_empty();
        let live_host = live_root && !obs0.host.vms.is_empty();
        if !live_host {
            sched = None;
        }
        // First reading after t0's thread times, so attribution starts with them.
        if let Some(h) = sched.as_mut() {
            sched_hook::put(&mut t0, &h.watch(&obs0.host.vms));
        }
        // Given sockets are checked even with no VM, so a wrong name is said.
        let ask_live = live_host || (live_root && !host.qmp.is_empty());
        let start = Instant::now();
        // The exit sample runs inside the interval, so it costs no extra time.
        let exit_len = host.exit_sample;
        let exit_thread = live_host.then(|| {
            own_threads::spawn("exit-sample", move || live::exit_sample(exit_len))
                .expect("spawning a thread")
        });
        if ask_live {
            live::add_side(&mut t0, &obs0.host.vms, host);
        }
        let procs0 = if ask_live {
            obs0.host.procs
        } else {
            Vec::new()
        };
        Ok(IntervalCapture {
            root: root.to_path_buf(),
            t0,
            start,
            taken_unix_s,
            sample_hz,
            host: host.clone(),
            ask_live,
            exit_thread,
            sched,
            procs0,
            starve,
            begun,
            asked: None,
            live_guest,
            exact: None,
        })
    }

    /// The interval asked for: a capture that takes longer by more than a
    /// margin says so (`host.capture-overran`), with its own threads' wait.
    pub fn asked(mut self, interval: Duration) -> Self {
        self.asked = Some(interval);
        self
    }

    /// Measures exact guest steal over the interval, on a live guest: the
    /// collector loads in the background (~0.12 s of CPU), so the first
    /// sample is not delayed and its span starts when it is up. For
    /// one-shot captures: a rule runner would load it every interval.
    pub fn with_exact_steal(mut self) -> Self {
        if self.live_guest {
            self.exact = Some(ExactStealHook::spawn());
        }
        self
    }

    /// When the start side was read.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// The start side (its CPUs are those the counters open on).
    pub fn start_side(&self) -> &MemFs {
        &self.t0
    }

    /// Reads the end side: the snapshot of the interval, with the series
    /// and the counter readings taken meanwhile.
    pub fn finish(
        mut self,
        samples: Vec<RawSample>,
        counters: Option<CounterCapture>,
    ) -> Result<Snapshot, ReadError> {
        let hardware = Hardware {
            cpuid: is_live_root(&self.root).then(cpuid::read_live),
            counters,
        };
        // Right before t1's thread times, so both cover the same interval.
        let sched = self.sched.as_mut().map(|h| h.read());
        let exact = self.exact.take().map(ExactStealHook::finish);
        let (mut t1, obs1) = record_side(&self.root, "live t1", Side::End)?;
        if let Some(e) = &exact {
            exact_steal_hook::put(&mut t1, e);
        }
        if let Some(s) = &sched {
            sched_hook::put(&mut t1, s);
        }
        if let Some(w) = self.starve.take() {
            let mut reading = w.finish();
            reading.own = self.asked.map(|a| own_wait(&self.root, a, self.begun));
            t1.insert(
                STARVE_FILE,
                serde_json::to_vec(&reading).unwrap_or_default(),
            );
        }
        if self.ask_live {
            live::add_side(&mut t1, &obs1.host.vms, &self.host);
            let wall_s = self.start.elapsed().as_secs_f64();
            live::add_affinity(&mut t1, &self.root, &self.procs0, &obs1.host, wall_s);
        }
        if let Some(s) = self.exit_thread {
            // A panicked sampler thread is reported like any other failure.
            let sample = s.join().unwrap_or_else(|_| live::exit_sample_failed());
            live::add_exit_sample(&mut t1, &sample);
        }
        let meta = Meta {
            format: FORMAT.to_string(),
            interval_s: self.start.elapsed().as_secs_f64(),
            hostname: t1.read_value("/proc/sys/kernel/hostname").ok().flatten(),
            taken_unix_s: self.taken_unix_s,
            clk_tck: clk_tck(),
            kernel: t1.read_value("/proc/sys/kernel/osrelease").ok().flatten(),
            stealscope_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            sample_hz: (self.sample_hz > 0.0).then_some(self.sample_hz),
        };
        Ok(Snapshot {
            meta,
            t0: self.t0,
            t1,
            samples,
            hardware,
            damage: None,
        })
    }
}

/// This capture's time: asked, taken (from before t0 was read) and its
/// own threads' run and run-queue wait meanwhile.
fn own_wait(
    root: &std::path::Path,
    asked: Duration,
    (at, (run0, wait0)): (Instant, (u64, u64)),
) -> OwnWait {
    let (run1, wait1) = starve::own_times(root);
    OwnWait {
        asked_s: asked.as_secs_f64(),
        took_s: at.elapsed().as_secs_f64(),
        wait_s: wait1.saturating_sub(wait0) as f64 / 1e9,
        run_s: run1.saturating_sub(run0) as f64 / 1e9,
    }
}

/// USER_HZ of this machine, the unit of /proc/stat.
pub fn clk_tck() -> Option<u64> {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map(|v| v as u64)
}

/// How often a capture wakes between samples to show progress and see a
/// stop, whatever the rate.
const TICK: Duration = Duration::from_millis(100);

/// A capture's side of the sampling loop: the series itself is kept by the
/// sampler ([`Series`]); this shows the time elapsed and ends the capture
/// on a failed /proc/stat read.
struct Watch<'a> {
    start: Instant,
    last: Instant,
    tick: &'a mut dyn FnMut(Duration),
}

impl Subscriber for Watch<'_> {
    fn sample(&mut self, s: Sample<'_>) -> Result<(), ReadError> {
        self.last = s.now;
        Ok(())
    }

    fn sample_error(&mut self, e: ReadError) -> Result<(), ReadError> {
        Err(e)
    }

    fn tick(&mut self, now: Instant) -> Result<(), ReadError> {
        (self.tick)(now.saturating_duration_since(self.start));
        Ok(())
    }
}

/// A captured interval, and how long it ran when a stop ended it early.
pub struct Captured {
    pub snapshot: Snapshot,
    pub stopped_after: Option<Duration>,
}

impl Captured {
    /// The note a report carries when the interval was cut short.
    pub fn note(&self, asked: Duration) -> Option<String> {
        self.stopped_after.map(|d| {
            format!(
                "sampling ended early (Ctrl-C) after {:.1} s of the {:.1} s asked for: figures cover that time",
                d.as_secs_f64(),
                asked.as_secs_f64()
            )
        })
    }
}

/// Captures one interval: the start side, the engine's sampler from then
/// on (no host scans: the sides read the vCPU threads; a last sample
/// exactly at the end), then the end side. `tick` sees the time elapsed
/// at every sample and at least every 100 ms (progress on a terminal);
/// `stop` ends the interval early with a last sample, and the snapshot
/// covers what was measured. On the live machine (root "/") with VMs it
/// also asks QMP and KVM stats fds at both ends and samples kvm:kvm_exit
/// during the interval (host::answers).
pub fn capture(
    opts: &CaptureOptions,
    host: &HostLiveOptions,
    stop: &dyn Wait,
    tick: &mut dyn FnMut(Duration),
) -> Result<Captured, ReadError> {
    let host = HostLiveOptions {
        exit_sample: host.exit_sample.min(opts.interval),
        ..host.clone()
    };
    let interval = IntervalCapture::start(&opts.root, opts.sample_hz, &host)?
        .asked(opts.interval)
        .with_exact_steal();
    // With no series asked for, one period is the interval: the counters
    // are still read at both ends.
    let hz = if opts.sample_hz > 0.0 {
        opts.sample_hz
    } else {
        1.0 / opts.interval.as_secs_f64()
    };
    let series = Arc::new(Series::default());
    drop(series.take(series::cap(hz, opts.interval)));
    let start = interval.started();
    let sampler = Sampler::open(
        SamplerOptions {
            counters: CounterReads::EverySample,
            host_every: None,
            duration: Some(opts.interval),
            from: Some(start),
            last_at_end: true,
            wake_every: Some(TICK),
            series: Some(series.clone()),
            ..SamplerOptions::new(&opts.root)
        },
        Some(interval.start_side()),
    )?;
    let mut watch = Watch {
        start,
        last: start,
        tick,
    };
    let ended = sampler.run(&Rate::new(hz), &mut watch, stop)?;
    let (mut samples, counters) = series.take(0);
    if opts.sample_hz <= 0.0 {
        samples.clear();
    }
    let snapshot = interval.finish(samples, series.counter_capture(counters))?;
    Ok(Captured {
        snapshot,
        stopped_after: (ended == Ended::Stopped)
            .then(|| watch.last.saturating_duration_since(start)),
    })
}

/// Runs under a hypervisor (the `hypervisor` CPU flag, or steal counted):
/// where exact guest steal can be read.
fn is_guest(o: &Observation) -> bool {
    stealscope_analysis::roles::hypervisor_flag(o)
        || o.stat.cpus.iter().any(|c| c.times.steal.unwrap_or(0) > 0)
}
