//! Live capture of one interval into a [`Snapshot`]: every file the rules
//! read at the start (t0) and end (t1), plus a /proc/stat series in between,
//! per-CPU hardware counters read with each sample, and CPUID.
//! `doctor` analyses this in-memory snapshot with the same code that reads a
//! snapshot from disk, so live and offline reports cannot drift apart.

use crate::host::answers::{self as live, HostLiveOptions};
use crate::hw_sampler::HwSampler;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stealscope_model::observation::{collect, Observation, Side};
use stealscope_readers::kmsg::RuleRecords;
use stealscope_readers::perf::{CounterCapture, CounterSample};
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

pub use stealscope_readers::clock::monotonic_ns;

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
    Ok((fs, obs))
}

/// CPUID and perf counters describe the machine we run on, not a directory:
/// they are captured only when the root is the live "/".
pub fn is_live_root(root: &std::path::Path) -> bool {
    root == std::path::Path::new("/")
}

/// Opens the counter groups on the online CPUs as `cpus_from` lists them
/// (the stat rows if sysfs does not say); None unless `root` is "/".
pub fn open_counters(
    root: &std::path::Path,
    cpus_from: &dyn stealscope_readers::Source,
) -> Option<HwSampler> {
    if !is_live_root(root) {
        return None;
    }
    let live = RootFs::new(root);
    let mut cpus = cpu_topology::read(cpus_from)
        .ok()
        .and_then(|c| c.online)
        .unwrap_or_default();
    if cpus.is_empty() {
        cpus = stat::read(cpus_from)
            .ok()
            .flatten()
            .map(|s| s.cpus.iter().filter_map(|r| r.cpu).collect())
            .unwrap_or_default();
    }
    Some(HwSampler::open(&live, &cpus))
}

/// One interval of a live capture: the files the rules read at its start,
/// then (in [`IntervalCapture::finish`]) at its end, with the /proc/stat
/// series the caller took meanwhile, the hardware counters read with each
/// sample ([`IntervalCapture::sample_counters`]), CPUID and, on a live host,
/// QMP and KVM statistics at both ends and a kvm:kvm_exit sample inside.
/// `capture` runs one; `serve` runs one after another to evaluate the rules
/// periodically.
pub struct IntervalCapture {
    root: std::path::PathBuf,
    t0: MemFs,
    start: Instant,
    taken_unix_s: Option<f64>,
    sample_hz: f64,
    hw: Option<HwSampler>,
    counter_samples: Vec<CounterSample>,
    host: HostLiveOptions,
    ask_live: bool,
    exit_thread: Option<std::thread::JoinHandle<stealscope_readers::kvm_exits::ExitSample>>,
    sched: Option<crate::host::sched_hook::SchedHook>,
}

impl IntervalCapture {
    pub fn start(
        root: &std::path::Path,
        sample_hz: f64,
        host: &HostLiveOptions,
    ) -> Result<Self, ReadError> {
        Self::start_inner(root, sample_hz, host, true)
    }

    /// For a caller that reads the hardware counters itself with every
    /// sample (serve's sampler) and hands them to [`Self::finish_with_counters`]:
    /// opens no counter groups of its own.
    pub fn start_without_counters(
        root: &std::path::Path,
        sample_hz: f64,
        host: &HostLiveOptions,
    ) -> Result<Self, ReadError> {
        Self::start_inner(root, sample_hz, host, false)
    }

    fn start_inner(
        root: &std::path::Path,
        sample_hz: f64,
        host: &HostLiveOptions,
        counters: bool,
    ) -> Result<Self, ReadError> {
        let taken_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .ok();
        let (mut t0, obs0) = record_side(root, "live t0", Side::Start)?;
        let live_root = is_live_root(root);
        let live_host = live_root && !obs0.host.vms.is_empty();
        // First after t0's thread times, so attribution starts with them.
        let sched = (live_host && host.attribution)
            .then(|| crate::host::sched_hook::SchedHook::start(&obs0.host.vms, &mut t0));
        let hw = counters.then(|| open_counters(root, &t0)).flatten();
        // Given sockets are checked even with no VM, so a wrong name is said.
        let ask_live = live_host || (live_root && !host.qmp.is_empty());
        let start = Instant::now();
        // The exit sample runs inside the interval, so it costs no extra time.
        let exit_len = host.exit_sample;
        let exit_thread =
            live_host.then(|| std::thread::spawn(move || live::exit_sample(exit_len)));
        if ask_live {
            live::add_side(&mut t0, &obs0.host.vms, host);
        }
        Ok(IntervalCapture {
            root: root.to_path_buf(),
            t0,
            start,
            taken_unix_s,
            sample_hz,
            hw,
            counter_samples: Vec::new(),
            host: host.clone(),
            ask_live,
            exit_thread,
            sched,
        })
    }

    /// When the start side was read.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Reads the counter groups; call right after each /proc/stat sample so
    /// that their windows line up with the steal windows.
    pub fn sample_counters(&mut self) {
        if let Some(h) = self.hw.as_mut() {
            if !h.counters().opened().is_empty() {
                self.counter_samples.push(h.sample());
            }
        }
    }

    /// [`Self::finish`] with counter readings taken by the caller.
    pub fn finish_with_counters(
        self,
        samples: Vec<RawSample>,
        counters: Option<CounterCapture>,
    ) -> Result<Snapshot, ReadError> {
        let mut snap = self.finish(samples)?;
        snap.hardware.counters = counters;
        Ok(snap)
    }

    pub fn finish(mut self, samples: Vec<RawSample>) -> Result<Snapshot, ReadError> {
        self.sample_counters();
        let hardware = Hardware {
            cpuid: is_live_root(&self.root).then(cpuid::read_live),
            counters: self.hw.map(|h| CounterCapture {
                opened: h.counters().opened().to_vec(),
                missing: h.counters().missing().to_vec(),
                samples: self.counter_samples,
            }),
        };
        // Right before t1's thread times, so both cover the same interval.
        let sched = self.sched.as_mut().map(|h| h.read());
        let (mut t1, obs1) = record_side(&self.root, "live t1", Side::End)?;
        if let Some(s) = &sched {
            crate::host::sched_hook::put(&mut t1, s);
        }
        if self.ask_live {
            live::add_side(&mut t1, &obs1.host.vms, &self.host);
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
    capture_with(opts, &HostLiveOptions::default())
}

/// As [`capture`]; on the live machine (root "/") with VMs, also asks QMP and
/// KVM stats fds at both ends and samples kvm:kvm_exit during the interval
/// (host::answers), storing the answers in the snapshot.
pub fn capture_with(opts: &CaptureOptions, host: &HostLiveOptions) -> Result<Snapshot, ReadError> {
    capture_watched(opts, host, &mut |_| true)
}

/// How often `tick` is called while nothing else happens.
const TICK: Duration = Duration::from_millis(100);

/// As [`capture_with`], calling `tick` with the time elapsed at least every
/// 100 ms (progress on a terminal); when it returns false the interval ends
/// there (Ctrl-C) and the snapshot covers what was measured.
pub fn capture_watched(
    opts: &CaptureOptions,
    host: &HostLiveOptions,
    tick: &mut dyn FnMut(Duration) -> bool,
) -> Result<Snapshot, ReadError> {
    let mut sampler = if opts.sample_hz > 0.0 {
        Some(StatSampler::open(&opts.root)?)
    } else {
        None
    };
    let host = HostLiveOptions {
        exit_sample: host.exit_sample.min(opts.interval),
        ..host.clone()
    };
    let mut interval = IntervalCapture::start(&opts.root, opts.sample_hz, &host)?;
    let start = interval.started();
    let end = start + opts.interval;
    let mut samples = Vec::new();
    if sampler.is_none() {
        interval.sample_counters();
    }
    let mut going = true;
    if let Some(s) = sampler.as_mut() {
        let period = Duration::from_secs_f64(1.0 / opts.sample_hz);
        let mut next = start;
        'series: loop {
            samples.push(RawSample {
                t_ns: monotonic_ns(),
                stat: s.cpu_lines()?,
            });
            interval.sample_counters();
            next += period;
            if next > end {
                break;
            }
            loop {
                going = tick(start.elapsed());
                let now = Instant::now();
                if !going {
                    break 'series;
                }
                if next <= now {
                    break;
                }
                std::thread::sleep((next - now).min(TICK));
            }
        }
    }
    while going {
        going = tick(start.elapsed());
        let now = Instant::now();
        if !going || now >= end {
            break;
        }
        std::thread::sleep((end - now).min(TICK));
    }
    if let Some(s) = sampler.as_mut() {
        samples.push(RawSample {
            t_ns: monotonic_ns(),
            stat: s.cpu_lines()?,
        });
    }
    interval.finish(samples)
}
