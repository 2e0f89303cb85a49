//! `record` on the running machine: /proc/stat at the sample rate (kept
//! open, pread), the hardware counters with each sample when any opened,
//! /proc/interrupts at its own lower rate (it costs ~8x a /proc/stat read),
//! every vCPU thread's schedstat once per host scan, probe windows handed
//! in by the caller, and a checkpoint (the files `doctor` reads, with the
//! scheduler-event collector's cumulative reading on a host with VMs) at
//! the start, every checkpoint period and at the end. Batches go to the file
//! once a second, so memory stays flat however long it runs. The series
//! is the engine's sampling loop ([`Sampler`]); this is its subscriber.

use crate::capture::{clk_tck, monotonic_ns, record_side};
use crate::host::answers::{self as host_live, HostLiveOptions};
use crate::host::sched_hook::{self, End};
use crate::host::HostTracker;
use crate::hw_sampler::is_live_root;
use crate::record_probe::{ProbeSource, WakeupWindows};
use crate::record_steal::{self, ExactRecorder, StealWanted};
use crate::sampler::{CounterReads, Ended, Sample, Sampler, SamplerOptions, Subscriber};
use crate::sched::SchedSlot;
use crate::stop::{next_due, Rate};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stealscope_model::host::discovery::ThreadRole;
use stealscope_model::host::running_wait_by::{scan_culprits, TOP_CULPRITS};
use stealscope_model::host::sched_store::StoredSched;
use stealscope_model::host::vm_labels;
use stealscope_model::host::HostObservation;
use stealscope_model::observation::Side;
use stealscope_readers::kvm_exits::ExitSample;
use stealscope_readers::kvmclock::{KvmClock, KvmClockError};
use stealscope_readers::pread::PreadFile;
use stealscope_readers::recording::{
    CounterInfo, CulpritScan, EndInfo, Header, KvmClockInfo, ProbeRecord, RecordingWriter,
    StealEpisodeRecord, StealSource, ThreadTimes, VcpuEntry,
};
use stealscope_readers::{cpuid, interrupts, MemFs, ReadError, Source};
use stealscope_who::SchedSample;

/// Batches are written this often: what SIGKILL can lose at most.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often to look for VMs started since (a listing of /proc, ~1 ms on
/// a VM guest: once a second it would be a tenth of the recorder's cost).
/// Known vCPU threads are read every host scan.
pub const VMM_WATCH_EVERY: Duration = Duration::from_secs(10);
/// How often a lone TSC counter is read. Reading another CPU's counter is
/// an IPI that waits for that CPU to wake: once a second it cost 4-6 µs a
/// sample on average here (alternating runs with and without counters), a
/// constant TSC MHz's worth.
pub const LONE_TSC_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub root: PathBuf,
    /// /proc/stat samples per second; None: by the steal route
    /// ([`record_steal::stat_hz`]).
    pub rate_hz: Option<f64>,
    pub steal: StealWanted,
    /// Steal episodes at or over this many ns are listed one by one.
    pub steal_threshold_ns: u64,
    /// /proc/interrupts samples per second; 0 = not recorded.
    pub irq_rate_hz: f64,
    /// Time between scans of the vCPU threads.
    pub host_scan: Duration,
    pub checkpoint: Duration,
    /// None: until `stop` is set.
    pub duration: Option<Duration>,
    /// Names of the probes whose windows the caller hands in.
    pub probes: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct RecordSummary {
    pub stat_samples: u64,
    pub irq_samples: u64,
    pub host_scans: u64,
    pub counter_samples: u64,
    pub probe_windows: u64,
    pub checkpoints: u64,
    pub bytes: u64,
    pub seconds: f64,
    /// CPU rows of the last sample.
    pub cpus: usize,
    /// "duration" or "signal".
    pub reason: String,
    /// The steal route, in one line ([`record_steal::describe`]).
    pub steal: String,
    pub steal_episodes: u64,
}

/// A checkpoint: the files a snapshot side holds, with QMP's and KVM's
/// answers on a live host (no kvm:kvm_exit sample: it would trace for a
/// second each time).
/// Also hands back the host observation it made (the VMs, for the
/// sampler's host scans).
fn checkpoint(root: &Path, side: Side) -> Result<(u64, MemFs, HostObservation), ReadError> {
    let t = monotonic_ns();
    let (mut fs, obs) = record_side(root, "checkpoint", side)?;
    if is_live_root(root) && !obs.host.vms.is_empty() {
        host_live::add_side(&mut fs, &obs.host.vms, &HostLiveOptions::default());
        let none = ExitSample::NotAvailable {
            reason: "record takes no kvm:kvm_exit sample".into(),
        };
        host_live::add_exit_sample(&mut fs, &none);
    }
    Ok((t, fs, obs.host))
}

/// Notes to the file, each distinct message once per source.
#[derive(Default)]
struct Notes {
    last: BTreeMap<&'static str, String>,
}

impl Notes {
    fn report(
        &mut self,
        w: &mut RecordingWriter,
        source: &'static str,
        r: Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        match r {
            Ok(()) => {
                self.last.remove(source);
                Ok(())
            }
            Err(e) => {
                let msg = format!("{source}: {e}");
                if self.last.get(source) == Some(&msg) {
                    return Ok(());
                }
                w.note(monotonic_ns(), &msg)?;
                self.last.insert(source, msg);
                Ok(())
            }
        }
    }
}

/// The recording's side of the sampling loop: each sample, interrupt
/// reading and host scan goes to the file; batches are flushed and
/// checkpoints taken on their own periods.
struct Feed<'a> {
    root: PathBuf,
    w: RecordingWriter,
    notes: Notes,
    sum: RecordSummary,
    irq: Option<PreadFile>,
    irq_period: Duration,
    next_irq: Instant,
    threads: Vec<(VcpuEntry, ThreadTimes)>,
    next_flush: Instant,
    next_checkpoint: Instant,
    checkpoint_every: Duration,
    probes: Option<&'a mut dyn ProbeSource>,
    windows: Vec<ProbeRecord>,
    probe_notes: Vec<String>,
    /// The collector's latest reading and the one of the previous scan.
    sched_now: Option<Arc<SchedSample>>,
    sched_prev: Option<Arc<SchedSample>>,
    /// The guest steal collector, on the exact route.
    exact: Option<ExactRecorder>,
    /// kvm-clock as opened at the start (each open forks a child that
    /// touches its page), for the end frame's anchor.
    kvm_clock: Option<KvmClock>,
}

impl Feed<'_> {
    fn read_irq(&mut self) -> Result<Option<interrupts::Interrupts>, ReadError> {
        let Some(f) = self.irq.as_mut() else {
            return Ok(None);
        };
        interrupts::parse(f.read_text()?, interrupts::PATH).map(Some)
    }

    fn steal(&mut self, episodes: Vec<StealEpisodeRecord>) {
        self.sum.steal_episodes += episodes.len() as u64;
        self.w.steal(episodes);
    }

    /// The vCPU threads of the last host scan, named as exporters name them.
    fn vcpus(&mut self, host: &HostTracker) {
        let labels = vm_labels(host.vms());
        self.threads.clear();
        for s in host.samples() {
            let (ThreadRole::Vcpu(vcpu), Some(vm)) = (s.role, labels.get(&s.pid)) else {
                continue;
            };
            self.threads.push((
                VcpuEntry {
                    pid: s.pid,
                    tid: s.tid,
                    vcpu,
                    vm: vm.clone(),
                },
                ThreadTimes {
                    run_ns: s.sched.run_ns,
                    wait_ns: s.sched.wait_ns,
                },
            ));
        }
    }
}

impl Subscriber for Feed<'_> {
    fn sample(&mut self, s: Sample<'_>) -> Result<(), ReadError> {
        self.w.stat(s.t_ns, s.stat)?;
        self.sum.stat_samples += 1;
        self.sum.cpus = s.stat.cpus.len();
        self.notes.report(&mut self.w, "stat", Ok(()))?;
        if let Some(c) = s.counters {
            self.w.counters(c);
            self.sum.counter_samples += 1;
        }
        Ok(())
    }

    fn sample_error(&mut self, e: ReadError) -> Result<(), ReadError> {
        self.notes.report(&mut self.w, "stat", Err(e))
    }

    fn host_started(&mut self, e: Option<ReadError>) -> Result<(), ReadError> {
        self.notes
            .report(&mut self.w, "host scan", e.map_or(Ok(()), Err))
    }

    fn host(&mut self, t: u64, h: &HostTracker, r: Result<(), ReadError>) -> Result<(), ReadError> {
        self.vcpus(h);
        self.notes.report(&mut self.w, "host scan", r)?;
        self.w.vcpu(t, &self.threads)?;
        self.sum.host_scans += 1;
        let (before, now) = (self.sched_prev.take(), self.sched_now.take());
        if let (Some(b), Some(n)) = (&before, &now) {
            let vms = scan_culprits(b, n, h.vms(), h.samples(), TOP_CULPRITS);
            self.w.culprits(CulpritScan { t_ns: t, vms });
        }
        self.sched_prev = now.or(before);
        Ok(())
    }

    fn sched(&mut self, r: Result<&Arc<SchedSample>, String>) -> Result<(), ReadError> {
        match r {
            Ok(s) => self.sched_now = Some(s.clone()),
            Err(why) => self.w.note(
                monotonic_ns(),
                &format!("who stole it: not recorded: {why}"),
            )?,
        }
        Ok(())
    }

    fn tick(&mut self, now: Instant) -> Result<(), ReadError> {
        if self.irq.is_some() && now >= self.next_irq {
            let t = monotonic_ns();
            match self.read_irq() {
                Ok(Some(irq)) => {
                    self.w.irq(t, &irq)?;
                    self.sum.irq_samples += 1;
                    self.notes.report(&mut self.w, "interrupts", Ok(()))?;
                }
                Ok(None) => {}
                Err(e) => self.notes.report(&mut self.w, "interrupts", Err(e))?,
            }
            self.next_irq = next_due(self.next_irq, self.irq_period, now);
        }
        if now >= self.next_flush {
            if let Some(e) = self.exact.as_mut().map(ExactRecorder::drain) {
                self.steal(e);
            }
            if let Some(p) = self.probes.as_mut() {
                p.drain(&mut self.windows, &mut self.probe_notes);
            }
            write_probes(
                &mut self.w,
                &mut self.windows,
                &mut self.probe_notes,
                &mut self.sum,
            )?;
            self.w.flush()?;
            self.next_flush = next_due(self.next_flush, FLUSH_EVERY, now);
        }
        Ok(())
    }

    fn next_tick(&self) -> Option<Instant> {
        let irq = self.irq.as_ref().map(|_| self.next_irq);
        [Some(self.next_flush), Some(self.next_checkpoint), irq]
            .into_iter()
            .flatten()
            .min()
    }

    fn checkpoint_due(&mut self, now: Instant, last: bool) -> bool {
        last || now >= self.next_checkpoint
    }

    /// The collector's reading, taken right before the files (as doctor's
    /// t1), goes in as /stealscope/sched.json: `report` then attributes
    /// the whole recording from the first and last checkpoints.
    /// The guest steal collector's is read right before them too.
    fn checkpoint(&mut self, sched: Option<StoredSched>) -> Result<(), ReadError> {
        let exact = self.exact.as_mut().map(ExactRecorder::reading);
        let (t, mut side, _) = checkpoint(&self.root, Side::End)?;
        if let Some(s) = &sched {
            sched_hook::put(&mut side, s);
        }
        if let Some((stored, episodes)) = exact {
            crate::exact_steal_hook::put(&mut side, &stored);
            self.steal(episodes);
        }
        self.w.checkpoint(t, &side.files)?;
        self.sum.checkpoints += 1;
        self.next_checkpoint =
            next_due(self.next_checkpoint, self.checkpoint_every, Instant::now());
        Ok(())
    }
}

fn write_probes(
    w: &mut RecordingWriter,
    windows: &mut Vec<ProbeRecord>,
    notes: &mut Vec<String>,
    sum: &mut RecordSummary,
) -> Result<(), ReadError> {
    sum.probe_windows += windows.len() as u64;
    windows.drain(..).for_each(|p| w.probe(p));
    for n in notes.drain(..) {
        w.note(monotonic_ns(), &n)?;
    }
    Ok(())
}

/// Seconds since the Unix epoch, now (0 if the clock is before it).
fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Who stole the vCPUs' time, on a live host: loaded before the first
/// checkpoint when a VMM runs (as doctor's before its t0), else started
/// with the first scan that finds vCPU threads. The scans and the
/// checkpoints read this one collector.
fn open_sched(root: &Path, live: bool) -> SchedSlot {
    if live && sched_hook::vmm_running(root) {
        SchedSlot::load()
    } else {
        SchedSlot::new(live)
    }
}

/// The start checkpoint, with the collector's first reading in it.
fn start_checkpoint(
    root: &Path,
    sched: &mut SchedSlot,
) -> Result<(u64, MemFs, HostObservation), ReadError> {
    let (t0, mut side0, host0) = checkpoint(root, Side::Start)?;
    // Its first reading right after the checkpoint's thread times.
    sched.watch_tids(
        host0
            .vms
            .iter()
            .flat_map(|v| v.vcpus.iter().map(|(_, t)| t.tid))
            .collect(),
    );
    if let Some(s) = sched.stored(End::Start) {
        sched_hook::put(&mut side0, &s);
    }
    Ok((t0, side0, host0))
}

fn open_sampler(
    opts: &RecordOptions,
    side0: &MemFs,
    host0: HostObservation,
    sched: SchedSlot,
) -> Result<Sampler, ReadError> {
    let root = opts.root.as_path();
    Ok(Sampler::open(
        SamplerOptions {
            // A lone TSC gives a constant TSC MHz: read at the start and
            // every LONE_TSC_EVERY. Any other counter is read with every
            // sample, so its windows line up with the steal windows.
            counters: CounterReads::EverySampleOrTscEvery(LONE_TSC_EVERY),
            host_every: Some(opts.host_scan),
            watch_every: Some(VMM_WATCH_EVERY),
            duration: opts.duration,
            // Parsed and encoded once a second, warm (sample_batch).
            batch: Some(FLUSH_EVERY),
            ..SamplerOptions::new(root)
        },
        Some(side0),
    )?
    // The start checkpoint walked /proc already: its VMs start the scans.
    .with_host(HostTracker::start_from(root, side0, host0))
    .with_sched(sched))
}

/// When and where the recording starts, and how it measures steal.
struct Start {
    unix_s: f64,
    mono_ns: u64,
    live: bool,
    rate_hz: f64,
    steal: StealSource,
    /// Only where our own process's clock pages are the machine's.
    kvm_clock: Option<Result<KvmClock, KvmClockError>>,
}

fn header(opts: &RecordOptions, side0: &MemFs, sampler: &Sampler, st: &Start) -> Header {
    Header {
        irq_rate_hz: (opts.irq_rate_hz > 0.0).then_some(opts.irq_rate_hz),
        host_scan_s: Some(opts.host_scan.as_secs_f64()),
        checkpoint_s: opts.checkpoint.as_secs_f64(),
        duration_s: opts.duration.map(|d| d.as_secs_f64()),
        hostname: side0.read_value("/proc/sys/kernel/hostname").ok().flatten(),
        kernel: side0
            .read_value("/proc/sys/kernel/osrelease")
            .ok()
            .flatten(),
        clk_tck: clk_tck(),
        stealscope_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        cpuid: st.live.then(cpuid::read_live),
        counters: sampler.counters().map(|c| CounterInfo {
            opened: c.opened().to_vec(),
            missing: c.missing().to_vec(),
        }),
        probes: opts.probes.clone(),
        steal: Some(st.steal.clone()),
        kvm_clock: st.kvm_clock.as_ref().map(KvmClockInfo::of),
        ..Header::new(st.rate_hz, st.unix_s, st.mono_ns)
    }
}

/// /proc/interrupts kept open, when recorded; a file that cannot be opened
/// is a note in the recording, not an error.
fn open_irq(
    opts: &RecordOptions,
    notes: &mut Notes,
    w: &mut RecordingWriter,
) -> Result<Option<PreadFile>, ReadError> {
    if opts.irq_rate_hz <= 0.0 {
        return Ok(None);
    }
    match PreadFile::open(&opts.root, interrupts::PATH) {
        Ok(f) => Ok(Some(f)),
        Err(e) => {
            notes.report(w, "interrupts", Err(e))?;
            Ok(None)
        }
    }
}

impl<'a> Feed<'a> {
    fn new(
        opts: &RecordOptions,
        w: RecordingWriter,
        notes: Notes,
        irq: Option<PreadFile>,
        start: Instant,
        probes: Option<&'a mut dyn ProbeSource>,
        exact: Option<ExactRecorder>,
    ) -> Feed<'a> {
        Feed {
            root: opts.root.clone(),
            w,
            notes,
            sum: RecordSummary {
                checkpoints: 1,
                ..Default::default()
            },
            irq,
            irq_period: Duration::from_secs_f64(1.0 / opts.irq_rate_hz.max(1e-3)),
            next_irq: start,
            threads: Vec::new(),
            // The first checkpoint and flush are a period after the start.
            next_flush: start + FLUSH_EVERY,
            next_checkpoint: start + opts.checkpoint,
            checkpoint_every: opts.checkpoint,
            probes,
            windows: Vec::new(),
            probe_notes: Vec::new(),
            sched_now: None,
            sched_prev: None,
            exact,
            kvm_clock: None,
        }
    }
}

/// Stops the probes, writes their last windows and the end frame.
fn finish(feed: Feed, ended: Ended, start: Instant) -> Result<RecordSummary, ReadError> {
    let Feed {
        mut w,
        mut sum,
        mut probes,
        mut windows,
        mut probe_notes,
        kvm_clock,
        ..
    } = feed;
    if let Some(p) = probes.as_mut() {
        p.stop();
        p.drain(&mut windows, &mut probe_notes);
    }
    write_probes(&mut w, &mut windows, &mut probe_notes, &mut sum)?;
    sum.seconds = start.elapsed().as_secs_f64();
    sum.reason = match ended {
        Ended::Stopped => "signal",
        Ended::Duration => "duration",
    }
    .to_string();
    let end = EndInfo {
        end_mono_ns: monotonic_ns(),
        reason: sum.reason.clone(),
        stat_samples: sum.stat_samples,
        kvm_clock: kvm_clock.and_then(|c| c.anchor().ok()),
    };
    sum.bytes = w.finish(&end)?;
    Ok(sum)
}

/// Records into `file` (named `path` in errors) until the duration is over
/// or `stop` is set, then writes a last checkpoint and the end frame.
pub fn record(
    opts: &RecordOptions,
    file: File,
    path: &str,
    stop: &AtomicBool,
    probes: Option<&mut dyn ProbeSource>,
) -> Result<RecordSummary, ReadError> {
    let root = opts.root.as_path();
    let (unix_s, mono_ns) = (unix_now_s(), monotonic_ns());
    let live = is_live_root(root);
    let mut sched = open_sched(root, live);
    // Its first reading right before the start checkpoint's files.
    let vmm = live && sched_hook::vmm_running(root);
    let (exact, steal) = record_steal::open(opts.steal, opts.steal_threshold_ns, live, vmm);
    let (t0, side0, host0) = start_checkpoint(root, &mut sched)?;
    let sampler = open_sampler(opts, &side0, host0, sched)?;
    let st = Start {
        unix_s,
        mono_ns,
        live,
        rate_hz: record_steal::stat_hz(opts.rate_hz, &steal),
        steal,
        kvm_clock: live.then(KvmClock::open),
    };
    let header = header(opts, &side0, &sampler, &st);
    let mut w = RecordingWriter::create(file, path, &header)?;
    w.checkpoint(t0, &side0.files)?;
    drop(side0);
    let mut notes = Notes::default();
    let irq = open_irq(opts, &mut notes, &mut w)?;
    // The sampling grid, the batches and the file's flushes all count from
    // here, so a batch is handed over on the tick that flushes it.
    let start = Instant::now();
    let sampler = sampler.starting_at(start);
    let mut feed = Feed::new(opts, w, notes, irq, start, probes, exact);
    feed.kvm_clock = st.kvm_clock.and_then(Result::ok);
    feed.sum.steal = record_steal::describe(&st.steal, st.rate_hz);
    let ended = sampler.run(&Rate::new(st.rate_hz), &mut feed, stop)?;
    finish(feed, ended, start)
}

/// Records to a new file at `path` (an existing file is refused, never
/// overwritten) until the duration is over or Ctrl-C / SIGTERM, which
/// finish the batch and leave a complete file. With "wakeup" among
/// `opts.probes`, that probe runs beside it, stopped before returning.
pub fn record_file(
    opts: &RecordOptions,
    path: &Path,
) -> Result<RecordSummary, Box<dyn std::error::Error>> {
    let name = path.display().to_string();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => format!("{name}: exists; refusing to overwrite"),
            _ => format!("{name}: {e}"),
        })?;
    let stop = stealscope_probes::signals::stop_on_signals()?;
    let mut probe = opts
        .probes
        .iter()
        .any(|p| p == "wakeup")
        .then(|| WakeupWindows::start(std::sync::Arc::clone(&stop)));
    let sum = record(
        opts,
        file,
        &name,
        &stop,
        probe.as_mut().map(|p| p as &mut dyn ProbeSource),
    );
    if let Some(p) = probe.as_mut() {
        p.stop();
    }
    Ok(sum?)
}
