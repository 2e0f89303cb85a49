//! Live capture of one interval into a [`Snapshot`]: every file the rules
//! read at the start (t0) and end (t1), plus a /proc/stat series in between,
//! per-CPU hardware counters read with each sample, and CPUID.
//! `doctor` analyses this in-memory snapshot with the same code that reads a
//! snapshot from disk, so live and offline reports cannot drift apart.

use crate::host::live::{self, HostLiveOptions};
use crate::hw::HwSampler;
use crate::observation::{collect, Observation, Side};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stealscope_readers::perf::CounterCapture;
use stealscope_readers::pread::PreadFile;
use stealscope_readers::snapshot::{Hardware, Meta, RawSample, Snapshot, FORMAT};
use stealscope_readers::{cpu_topology, cpuid, stat, MemFs, ReadError, Recorder, RootFs, Source};

#[derive(Debug, Clone)]
pub struct CaptureOptions {
    pub root: PathBuf,
    pub interval: Duration,
    /// Rate of the /proc/stat series; 0 disables it.
    pub sample_hz: f64,
}

pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// The cpu rows of /proc/stat as text (what samples.jsonl stores), read
/// through a kept-open file.
pub struct StatSampler(PreadFile);

impl StatSampler {
    pub fn open(root: &std::path::Path) -> Result<Self, ReadError> {
        PreadFile::open(root, stat::PATH).map(StatSampler)
    }

    pub fn cpu_lines(&mut self) -> Result<String, ReadError> {
        let text = self.0.read_text()?;
        let end: usize = text
            .split_inclusive('\n')
            .take_while(|l| l.starts_with("cpu"))
            .map(str::len)
            .sum();
        Ok(text[..end].to_string())
    }
}

/// Reads a side through a recorder and keeps the bytes as a snapshot side.
fn record_side(
    root: &std::path::Path,
    name: &str,
    side: Side,
) -> Result<(MemFs, Observation), ReadError> {
    let rec = Recorder::new(RootFs::new(root));
    let obs = collect(&rec, side)?;
    // The hostname is not a rule input, but meta.json records it.
    let _ = rec.read("/proc/sys/kernel/hostname");
    let mut fs = MemFs::new(name);
    fs.files = rec.into_files();
    Ok((fs, obs))
}

/// CPUID and perf counters describe the machine we run on, not a directory:
/// they are captured only when the root is the live "/".
fn is_live_root(root: &std::path::Path) -> bool {
    root == std::path::Path::new("/")
}

/// Opens the counter groups on the online CPUs (the stat rows if sysfs
/// does not say).
fn open_counters(root: &std::path::Path, t0: &MemFs) -> Option<HwSampler> {
    if !is_live_root(root) {
        return None;
    }
    let live = RootFs::new(root);
    let mut cpus = cpu_topology::read(t0)
        .ok()
        .and_then(|c| c.online)
        .unwrap_or_default();
    if cpus.is_empty() {
        cpus = stat::read(t0)
            .ok()
            .flatten()
            .map(|s| s.cpus.iter().filter_map(|r| r.cpu).collect())
            .unwrap_or_default();
    }
    Some(HwSampler::open(&live, &cpus))
}

pub fn capture(opts: &CaptureOptions) -> Result<Snapshot, ReadError> {
    capture_with(opts, &HostLiveOptions::default())
}

/// As [`capture`]; on the live machine (root "/") with VMs, also asks QMP and
/// KVM stats fds at both ends and samples kvm:kvm_exit during the interval
/// (host::live), storing the answers in the snapshot.
pub fn capture_with(opts: &CaptureOptions, host: &HostLiveOptions) -> Result<Snapshot, ReadError> {
    let taken_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .ok();
    let mut sampler = if opts.sample_hz > 0.0 {
        Some(StatSampler::open(&opts.root)?)
    } else {
        None
    };
    let (mut t0, obs0) = record_side(&opts.root, "live t0", Side::Start)?;
    let mut hw = open_counters(&opts.root, &t0);
    let mut counter_samples = Vec::new();
    // Counters are read right after each /proc/stat sample so that their
    // windows line up with the steal windows.
    let mut read_counters = |hw: &mut Option<HwSampler>| {
        if let Some(h) = hw.as_mut() {
            if !h.counters().opened().is_empty() {
                counter_samples.push(h.sample());
            }
        }
    };
    let live_root = is_live_root(&opts.root);
    let live_host = live_root && !obs0.host.vms.is_empty();
    // Given sockets are checked even with no VM, so a wrong name is said.
    let ask_live = live_host || (live_root && !host.qmp.is_empty());
    let start = Instant::now();
    // The exit sample runs inside the interval, so it costs no extra time.
    let exit_len = host.exit_sample.min(opts.interval);
    let exit_thread = live_host.then(|| std::thread::spawn(move || live::exit_sample(exit_len)));
    if ask_live {
        live::add_side(&mut t0, &obs0.host.vms, host);
    }
    let mut samples = Vec::new();
    if sampler.is_none() {
        read_counters(&mut hw);
    }
    if let Some(s) = sampler.as_mut() {
        let period = Duration::from_secs_f64(1.0 / opts.sample_hz);
        let mut next = start;
        loop {
            samples.push(RawSample {
                t_ns: monotonic_ns(),
                stat: s.cpu_lines()?,
            });
            read_counters(&mut hw);
            next += period;
            if next > start + opts.interval {
                break;
            }
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
        }
    }
    let elapsed = start.elapsed();
    if elapsed < opts.interval {
        std::thread::sleep(opts.interval - elapsed);
    }
    if let Some(s) = sampler.as_mut() {
        samples.push(RawSample {
            t_ns: monotonic_ns(),
            stat: s.cpu_lines()?,
        });
    }
    read_counters(&mut hw);
    let hardware = Hardware {
        cpuid: is_live_root(&opts.root).then(cpuid::read_live),
        counters: hw.map(|h| CounterCapture {
            opened: h.counters().opened().to_vec(),
            missing: h.counters().missing().to_vec(),
            samples: counter_samples,
        }),
    };
    let (mut t1, obs1) = record_side(&opts.root, "live t1", Side::End)?;
    if ask_live {
        live::add_side(&mut t1, &obs1.host.vms, host);
    }
    if let Some(s) = exit_thread {
        // A panicked sampler thread is reported like any other failure.
        let sample = s.join().unwrap_or_else(|_| live::exit_sample_failed());
        live::add_exit_sample(&mut t1, &sample);
    }
    let meta = Meta {
        format: FORMAT.to_string(),
        interval_s: start.elapsed().as_secs_f64(),
        hostname: t1.read_value("/proc/sys/kernel/hostname").ok().flatten(),
        taken_unix_s,
        clk_tck: nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .map(|v| v as u64),
        kernel: t1.read_value("/proc/sys/kernel/osrelease").ok().flatten(),
        stealscope_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        sample_hz: (opts.sample_hz > 0.0).then_some(opts.sample_hz),
    };
    Ok(Snapshot {
        meta,
        t0,
        t1,
        samples,
        hardware,
    })
}
