//! Live capture of one interval into a [`Snapshot`]: every file the rules
//! read at the start (t0) and end (t1), plus a /proc/stat series in between.
//! `doctor` analyses this in-memory snapshot with the same code that reads a
//! snapshot from disk, so live and offline reports cannot drift apart.

use crate::observation::{collect, Side};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stealscope_readers::pread::PreadFile;
use stealscope_readers::snapshot::{Meta, RawSample, Snapshot, FORMAT};
use stealscope_readers::{stat, MemFs, ReadError, Recorder, RootFs, Source};

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
fn record_side(root: &std::path::Path, name: &str, side: Side) -> Result<MemFs, ReadError> {
    let rec = Recorder::new(RootFs::new(root));
    collect(&rec, side)?;
    // The hostname is not a rule input, but meta.json records it.
    let _ = rec.read("/proc/sys/kernel/hostname");
    let mut fs = MemFs::new(name);
    fs.files = rec.into_files();
    Ok(fs)
}

/// One interval of a live capture: the files the rules read at its start,
/// then (in [`IntervalCapture::finish`]) at its end, with the /proc/stat
/// series the caller took meanwhile. `capture` runs one; `serve` runs one
/// after another to evaluate the rules periodically.
pub struct IntervalCapture {
    root: std::path::PathBuf,
    t0: MemFs,
    start: Instant,
    taken_unix_s: Option<f64>,
    sample_hz: f64,
}

impl IntervalCapture {
    pub fn start(root: &std::path::Path, sample_hz: f64) -> Result<Self, ReadError> {
        let taken_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .ok();
        let t0 = record_side(root, "live t0", Side::Start)?;
        Ok(IntervalCapture {
            root: root.to_path_buf(),
            t0,
            start: Instant::now(),
            taken_unix_s,
            sample_hz,
        })
    }

    /// When the start side was read.
    pub fn started(&self) -> Instant {
        self.start
    }

    pub fn finish(self, samples: Vec<RawSample>) -> Result<Snapshot, ReadError> {
        let t1 = record_side(&self.root, "live t1", Side::End)?;
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
        })
    }
}

/// USER_HZ of this machine, the unit of /proc/stat.
pub fn clk_tck() -> Option<u64> {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map(|v| v as u64)
}

pub fn capture(opts: &CaptureOptions) -> Result<Snapshot, ReadError> {
    let mut sampler = if opts.sample_hz > 0.0 {
        Some(StatSampler::open(&opts.root)?)
    } else {
        None
    };
    let interval = IntervalCapture::start(&opts.root, opts.sample_hz)?;
    let start = interval.started();
    let mut samples = Vec::new();
    if let Some(s) = sampler.as_mut() {
        let period = Duration::from_secs_f64(1.0 / opts.sample_hz);
        let mut next = start;
        loop {
            samples.push(RawSample {
                t_ns: monotonic_ns(),
                stat: s.cpu_lines()?,
            });
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
    interval.finish(samples)
}
