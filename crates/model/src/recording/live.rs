//! `record` on the running machine: /proc/stat at the sample rate (kept
//! open, pread), the hardware counters with each sample when any opened,
//! /proc/interrupts at its own lower rate (it costs ~8x a /proc/stat read),
//! every vCPU thread's schedstat once per host scan, probe windows handed
//! in by the caller, and a checkpoint (the files `doctor` reads) at the
//! start, every checkpoint period and at the end. Batches go to the file
//! once a second, so memory stays flat however long it runs.

use crate::capture::{clk_tck, is_live_root, monotonic_ns, open_counters, record_side};
use crate::host::discovery::ThreadRole;
use crate::host::live::{self as host_live, HostLiveOptions};
use crate::host::{vm_labels, HostTracker};
use crate::observation::Side;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stealscope_readers::kvm_exits::ExitSample;
use stealscope_readers::perf::Counter;
use stealscope_readers::pread::PreadFile;
use stealscope_readers::recording::{
    CounterInfo, EndInfo, Header, ProbeRecord, RecordingWriter, ThreadTimes, VcpuEntry,
};
use stealscope_readers::stat::ProcStat;
use stealscope_readers::{cpuid, interrupts, stat, MemFs, ReadError, Source};

/// Batches are written this often: what SIGKILL can lose at most.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How often to look for VMs started since (a listing of /proc, ~1 ms on
/// a VM guest: once a second it would be a tenth of the recorder's cost).
/// Known vCPU threads are read every host scan.
pub const VMM_WATCH_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub root: PathBuf,
    /// /proc/stat samples per second.
    pub rate_hz: f64,
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

/// Probe windows measured beside the recorder (in another thread).
pub trait ProbeSource {
    /// Windows finished since the last call, and what the probe had to say
    /// (no real-time priority, an error that ended it).
    fn drain(&mut self, out: &mut Vec<ProbeRecord>, notes: &mut Vec<String>);
    /// Ends the measurement, waiting for its last (partial) window.
    fn stop(&mut self);
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
}

/// A checkpoint: the files a snapshot side holds, with QMP's and KVM's
/// answers on a live host (no kvm:kvm_exit sample: it would trace for a
/// second each time).
fn checkpoint(root: &Path, side: Side) -> Result<(u64, MemFs), ReadError> {
    let t = monotonic_ns();
    let (mut fs, obs) = record_side(root, "checkpoint", side)?;
    if is_live_root(root) && !obs.host.vms.is_empty() {
        host_live::add_side(&mut fs, &obs.host.vms, &HostLiveOptions::default());
        let none = ExitSample::NotAvailable {
            reason: "record takes no kvm:kvm_exit sample".into(),
        };
        host_live::add_exit_sample(&mut fs, &none);
    }
    Ok((t, fs))
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

/// The live sources of the series.
struct Sources {
    stat: PreadFile,
    parsed: ProcStat,
    irq: Option<PreadFile>,
    host: HostTracker,
    threads: Vec<(VcpuEntry, ThreadTimes)>,
}

impl Sources {
    fn read_stat(&mut self) -> Result<(), ReadError> {
        let text = self.stat.read_text()?;
        stat::parse_into(text, stat::PATH, true, &mut self.parsed)
    }

    fn read_irq(&mut self) -> Result<Option<interrupts::Interrupts>, ReadError> {
        let Some(f) = self.irq.as_mut() else {
            return Ok(None);
        };
        interrupts::parse(f.read_text()?, interrupts::PATH).map(Some)
    }

    /// The vCPU threads of the last host scan, named as exporters name them.
    fn scan_host(&mut self, root: &Path, look_for_new: bool) -> Result<(), ReadError> {
        let r = self.host.scan(root, look_for_new);
        let labels = vm_labels(self.host.vms());
        self.threads.clear();
        for s in self.host.samples() {
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
        r
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

/// When a periodic task is due next: `period` after `prev`, on the same
/// grid; deadlines already past (a stall, a loaded machine) are skipped,
/// not caught up with back-to-back reads.
fn next_due(prev: Instant, period: Duration, now: Instant) -> Instant {
    let n = prev + period;
    if n > now {
        return n;
    }
    let behind = (now - n).as_nanos() / period.as_nanos().max(1) + 1;
    n + period * behind.min(u32::MAX as u128) as u32
}

/// Records into `file` (named `path` in errors) until the duration is over
/// or `stop` is set, then writes a last checkpoint and the end frame.
pub fn record(
    opts: &RecordOptions,
    file: File,
    path: &str,
    stop: &AtomicBool,
    mut probes: Option<&mut dyn ProbeSource>,
) -> Result<RecordSummary, ReadError> {
    let root = opts.root.as_path();
    let start_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let start_mono_ns = monotonic_ns();
    let (t0, side0) = checkpoint(root, Side::Start)?;
    let mut hw = open_counters(root, &side0);
    let header = Header {
        irq_rate_hz: (opts.irq_rate_hz > 0.0).then_some(opts.irq_rate_hz),
        host_scan_s: Some(opts.host_scan.as_secs_f64()),
        checkpoint_s: opts.checkpoint.as_secs_f64(),
        hostname: side0.read_value("/proc/sys/kernel/hostname").ok().flatten(),
        kernel: side0
            .read_value("/proc/sys/kernel/osrelease")
            .ok()
            .flatten(),
        clk_tck: clk_tck(),
        stealscope_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        cpuid: is_live_root(root).then(cpuid::read_live),
        counters: hw.as_ref().map(|h| CounterInfo {
            opened: h.counters().opened().to_vec(),
            missing: h.counters().missing().to_vec(),
        }),
        probes: opts.probes.clone(),
        ..Header::new(opts.rate_hz, start_unix_s, start_mono_ns)
    };
    if hw
        .as_ref()
        .is_some_and(|h| h.counters().opened().is_empty())
    {
        hw = None;
    }
    // A lone TSC gives a constant TSC MHz: once a second is enough (at 100 Hz
    // its reads would be most of the file). Any other counter is read with
    // every sample, so its windows line up with the steal windows.
    let per_sample_counters = hw
        .as_ref()
        .is_some_and(|h| h.counters().opened().iter().any(|&c| c != Counter::Tsc));
    let mut w = RecordingWriter::create(file, path, &header)?;
    w.checkpoint(t0, &side0.files)?;
    drop(side0);
    let mut notes = Notes::default();
    let (host, host_err) = HostTracker::start(root);
    let irq = if opts.irq_rate_hz > 0.0 {
        match PreadFile::open(root, interrupts::PATH) {
            Ok(f) => Some(f),
            Err(e) => {
                notes.report(&mut w, "interrupts", Err(e))?;
                None
            }
        }
    } else {
        None
    };
    let mut src = Sources {
        stat: PreadFile::open(root, stat::PATH)?,
        parsed: ProcStat::default(),
        irq,
        host,
        threads: Vec::new(),
    };
    notes.report(&mut w, "host scan", host_err.map_or(Ok(()), Err))?;

    let mut sum = RecordSummary {
        checkpoints: 1,
        ..Default::default()
    };
    let period = Duration::from_secs_f64(1.0 / opts.rate_hz);
    let irq_period = Duration::from_secs_f64(1.0 / opts.irq_rate_hz.max(1e-3));
    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let (mut next, mut next_irq, mut next_host) = (start, start, start);
    // The first checkpoint and flush are a period after the start.
    let mut next_flush = start + FLUSH_EVERY;
    let mut next_watch = start + VMM_WATCH_EVERY;
    let mut next_checkpoint = start + opts.checkpoint;
    let mut windows = Vec::new();
    let mut probe_notes = Vec::new();
    let reason = loop {
        let t = monotonic_ns();
        let read = src.read_stat();
        if read.is_ok() {
            w.stat(t, &src.parsed)?;
            sum.stat_samples += 1;
            sum.cpus = src.parsed.cpus.len();
        }
        notes.report(&mut w, "stat", read)?;
        let now = Instant::now();
        if let Some(h) = hw.as_mut() {
            if per_sample_counters || now >= next_flush {
                w.counters(&h.sample());
                sum.counter_samples += 1;
            }
        }
        if src.irq.is_some() && now >= next_irq {
            let t = monotonic_ns();
            match src.read_irq() {
                Ok(Some(irq)) => {
                    w.irq(t, &irq)?;
                    sum.irq_samples += 1;
                    notes.report(&mut w, "interrupts", Ok(()))?;
                }
                Ok(None) => {}
                Err(e) => notes.report(&mut w, "interrupts", Err(e))?,
            }
            next_irq = next_due(next_irq, irq_period, now);
        }
        if now >= next_host {
            let t = monotonic_ns();
            let r = src.scan_host(root, now >= next_watch);
            if now >= next_watch {
                next_watch = next_due(next_watch, VMM_WATCH_EVERY, now);
            }
            notes.report(&mut w, "host scan", r)?;
            w.vcpu(t, &src.threads)?;
            sum.host_scans += 1;
            next_host = next_due(next_host, opts.host_scan, now);
        }
        if now >= next_flush {
            if let Some(p) = probes.as_mut() {
                p.drain(&mut windows, &mut probe_notes);
            }
            write_probes(&mut w, &mut windows, &mut probe_notes, &mut sum)?;
            w.flush()?;
            next_flush = next_due(next_flush, FLUSH_EVERY, now);
        }
        if now >= next_checkpoint {
            let (t, side) = checkpoint(root, Side::End)?;
            w.checkpoint(t, &side.files)?;
            sum.checkpoints += 1;
            next_checkpoint = next_due(next_checkpoint, opts.checkpoint, Instant::now());
        }
        if stop.load(Ordering::Relaxed) {
            break "signal";
        }
        next = next_due(next, period, Instant::now());
        if end.is_some_and(|e| next > e) {
            break "duration";
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
    };
    if let Some(p) = probes.as_mut() {
        p.stop();
        p.drain(&mut windows, &mut probe_notes);
    }
    write_probes(&mut w, &mut windows, &mut probe_notes, &mut sum)?;
    let (t, side) = checkpoint(root, Side::End)?;
    w.checkpoint(t, &side.files)?;
    sum.checkpoints += 1;
    sum.seconds = start.elapsed().as_secs_f64();
    sum.reason = reason.to_string();
    let end = EndInfo {
        end_mono_ns: monotonic_ns(),
        reason: sum.reason.clone(),
        stat_samples: sum.stat_samples,
    };
    sum.bytes = w.finish(&end)?;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_deadlines_are_skipped_on_the_grid() {
        let t = Instant::now();
        let p = Duration::from_millis(10);
        assert_eq!(next_due(t, p, t + Duration::from_millis(3)), t + p);
        // 25 ms late: the deadlines at 10 and 20 ms are gone, 30 ms is next.
        assert_eq!(next_due(t, p, t + Duration::from_millis(25)), t + 3 * p);
        assert_eq!(next_due(t, p, t + p), t + 2 * p);
    }
}
