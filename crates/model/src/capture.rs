//! Live capture of one interval into a [`Snapshot`]: every file the rules
//! read at the start (t0) and end (t1), plus a /proc/stat series in between.
//! `doctor` analyses this in-memory snapshot with the same code that reads a
//! snapshot from disk, so live and offline reports cannot drift apart.

use crate::observation::collect;
use std::io::{Error, ErrorKind};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
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
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Keeps /proc/stat open and re-reads it with pread into a reused buffer:
/// the cheapest way to sample it (no open/close per sample).
pub struct StatSampler {
    file: std::fs::File,
    buf: Vec<u8>,
    path: String,
}

impl StatSampler {
    pub fn open(root: &std::path::Path) -> Result<Self, ReadError> {
        let full = RootFs::new(root).resolve(stat::PATH);
        let file = std::fs::File::open(&full).map_err(|e| ReadError::io(stat::PATH, e))?;
        Ok(StatSampler {
            file,
            buf: vec![0; 64 * 1024],
            path: stat::PATH.to_string(),
        })
    }

    /// Reads the whole file; returns the bytes read.
    pub fn read(&mut self) -> Result<&[u8], ReadError> {
        loop {
            let mut len = 0;
            loop {
                if len == self.buf.len() {
                    break;
                }
                match self.file.read_at(&mut self.buf[len..], len as u64) {
                    Ok(0) => return Ok(&self.buf[..len]),
                    Ok(n) => len += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ReadError::io(&self.path, e)),
                }
            }
            // Buffer full: the file is bigger than we thought; grow and retry.
            if self.buf.len() >= 64 << 20 {
                return Err(ReadError::io(&self.path, Error::other("file larger than 64 MiB")));
            }
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
    }

    /// The cpu rows of the file as text (what samples.jsonl stores).
    pub fn cpu_lines(&mut self) -> Result<String, ReadError> {
        let path = self.path.clone();
        let bytes = self.read()?;
        let text = std::str::from_utf8(bytes).map_err(|_| ReadError::parse(&path, "not text"))?;
        let mut end = 0;
        for line in text.split_inclusive('\n') {
            if !line.starts_with("cpu") {
                break;
            }
            end += line.len();
        }
        Ok(text[..end].to_string())
    }
}

/// Reads a side through a recorder and keeps the bytes as a snapshot side.
fn record_side(root: &std::path::Path, name: &str) -> Result<MemFs, ReadError> {
    let rec = Recorder::new(RootFs::new(root));
    collect(&rec)?;
    // The hostname is not a rule input, but meta.json records it.
    let _ = rec.read("/proc/sys/kernel/hostname");
    let mut fs = MemFs::new(name);
    fs.files = rec.into_files();
    Ok(fs)
}

pub fn capture(opts: &CaptureOptions) -> Result<Snapshot, ReadError> {
    let taken_unix_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).ok();
    let mut sampler = if opts.sample_hz > 0.0 { Some(StatSampler::open(&opts.root)?) } else { None };
    let t0 = record_side(&opts.root, "live t0")?;
    let start = Instant::now();
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
    let t1 = record_side(&opts.root, "live t1")?;
    let meta = Meta {
        format: FORMAT.to_string(),
        interval_s: start.elapsed().as_secs_f64(),
        hostname: t1.read_value("/proc/sys/kernel/hostname").ok().flatten(),
        taken_unix_s,
        clk_tck: nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map(|v| v as u64),
        kernel: t1.read_value("/proc/sys/kernel/osrelease").ok().flatten(),
        stealscope_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        sample_hz: (opts.sample_hz > 0.0).then_some(opts.sample_hz),
    };
    Ok(Snapshot { meta, t0, t1, samples })
}
