//! The sampling loop every live command shares: /proc/stat at the chosen
//! rate through a kept-open file (one steal window per sample), the
//! hardware counter groups read right after it (so their windows are the
//! steal windows), every vCPU thread's schedstat once per host scan
//! (rediscovering VMs when a VMM process starts), and the scheduler-event
//! collector read right before each host scan and each checkpoint a
//! subscriber takes ([`crate::sched`]). What each command
//! does with a reading is its [`Subscriber`]'s business: serve updates its
//! metrics, top its view, record writes the file, doctor keeps one
//! interval ([`crate::capture`]: no host scans, a last sample at t1).

use crate::host::sched_hook::End;
use crate::host::HostTracker;
pub use crate::hw_sampler::CounterReads;
use crate::hw_sampler::{is_live_root, open_counters, CounterSchedule, HwSampler};
use crate::sample_batch::{Delivered, SampleBatch};
use crate::sched::SchedSlot;
use crate::series::Series;
use crate::stop::{next_due, next_due_ns, Rate, Wait};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stealscope_model::host::sched_store::StoredSched;
use stealscope_readers::clock::{monotonic_ns, sleep_until_ns};
use stealscope_readers::perf::{CounterSample, CpuCounters};
use stealscope_readers::pread::PreadFile;
use stealscope_readers::snapshot::RawSample;
use stealscope_readers::stat::{self, ProcStat};
use stealscope_readers::tsc_clock::TscClock;
use stealscope_readers::{ReadError, RootFs, Source};
use stealscope_who::SchedSample;

#[derive(Debug, Clone)]
pub struct SamplerOptions {
    /// Read /proc and /sys under this directory; counters only on "/".
    pub root: PathBuf,
    pub counters: CounterReads,
    /// How often vCPU threads are read; None: no discovery and no scans
    /// (doctor: the sides it reads at both ends hold the threads).
    pub host_every: Option<Duration>,
    /// How often to look for VMMs started since (a listing of /proc); None:
    /// with every scan.
    pub watch_every: Option<Duration>,
    /// End after this long (None: when stopped).
    pub duration: Option<Duration>,
    /// The duration and the sampling grid count from here, not from the
    /// start of `run` (doctor: from when its start side was read).
    pub from: Option<Instant>,
    /// End with one more sample: exactly at the end of the duration, or
    /// when stopped, so the series covers all the time measured.
    pub last_at_end: bool,
    /// Between samples, wake at least this often to call the subscriber's
    /// `tick` and see a stop (doctor: progress and Ctrl-C at any rate).
    pub wake_every: Option<Duration>,
    /// Keep the raw series for a rule runner ([`crate::live`]).
    pub series: Option<Arc<Series>>,
    /// Read the scheduler-event collector before every host scan.
    pub sched: bool,
    /// Hand the samples to the subscriber this often, and before each
    /// host scan and checkpoint, instead of with each read: the reads keep
    /// their times, and parsing runs warm ([`crate::sample_batch`]).
    /// Ignored with `series`, whose rule runner wants each sample at once.
    pub batch: Option<Duration>,
}

impl SamplerOptions {
    /// Host scans and VMM checks once a second, no counters, no series.
    pub fn new(root: &Path) -> SamplerOptions {
        SamplerOptions {
            root: root.to_path_buf(),
            counters: CounterReads::Off,
            host_every: Some(Duration::from_secs(1)),
            watch_every: None,
            duration: None,
            from: None,
            last_at_end: false,
            wake_every: None,
            series: None,
            sched: false,
            batch: None,
        }
    }
}

/// One /proc/stat sample, with the counter reading taken right after it.
pub struct Sample<'a> {
    pub t_ns: u64,
    pub now: Instant,
    pub stat: &'a ProcStat,
    pub counters: Option<&'a CounterSample>,
}

/// What the sampling loop hands each command. Every method runs on the
/// sampling thread; an error ends the loop (record: the file cannot be
/// written), so live views report theirs and return Ok.
pub trait Subscriber {
    fn sample(&mut self, _s: Sample<'_>) -> Result<(), ReadError> {
        Ok(())
    }
    /// A /proc/stat read that failed; the next success clears it.
    fn sample_error(&mut self, _e: ReadError) -> Result<(), ReadError> {
        Ok(())
    }
    /// Discovery at the start (the error, if it had one).
    fn host_started(&mut self, _e: Option<ReadError>) -> Result<(), ReadError> {
        Ok(())
    }
    /// A host scan: `t_ns` taken just before it, the threads it read.
    fn host(
        &mut self,
        _t_ns: u64,
        _tracker: &HostTracker,
        _r: Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        Ok(())
    }
    /// The collector's cumulative counters, read right before a host scan
    /// (the `host` call that follows), or why there are none (said once).
    fn sched(&mut self, _r: Result<&Arc<SchedSample>, String>) -> Result<(), ReadError> {
        Ok(())
    }
    /// After each sample and scan: periodic work of the command's own.
    fn tick(&mut self, _now: Instant) -> Result<(), ReadError> {
        Ok(())
    }
    /// The earliest time `tick` or `checkpoint_due` can have work, asked
    /// after each call of both; None: call them with every sample. In
    /// batch mode the samples before it are taken without either.
    fn next_tick(&self) -> Option<Instant> {
        None
    }
    /// Whether the subscriber takes a checkpoint now (record: each
    /// checkpoint period after a tick, and `last` when the loop ends);
    /// if so, [`Subscriber::checkpoint`] follows.
    fn checkpoint_due(&mut self, _now: Instant, _last: bool) -> bool {
        false
    }
    /// A checkpoint: the collector's cumulative reading, read right
    /// before this call, as a snapshot side stores it (None: not asked
    /// for, or no vCPU thread to watch yet).
    fn checkpoint(&mut self, _sched: Option<StoredSched>) -> Result<(), ReadError> {
        Ok(())
    }
}

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Stopped,
    Duration,
}

/// The sampling loop's schedule, and what it carries from one sample to
/// the next.
struct LoopState {
    host: Option<HostTracker>,
    counters: CounterSchedule,
    /// How often held samples are delivered (batch mode only).
    batch: Option<Duration>,
    end: Option<Instant>,
    next: Instant,
    next_host: Instant,
    next_watch: Instant,
    next_batch: Instant,
    /// Set once the sample under way is the last: why the loop ends.
    ending: Option<Ended>,
}

pub struct Sampler {
    opts: SamplerOptions,
    stat: PreadFile,
    parsed: ProcStat,
    /// None off the live root, with counters off, or when none opened.
    hw: Option<HwSampler>,
    /// VMs found by the caller (see [`Sampler::with_host`]).
    tracker: Option<(HostTracker, Option<ReadError>)>,
    /// The scheduler-event collector: read before each host scan and
    /// checkpoint.
    sched: SchedSlot,
    /// Reads not handed over yet (`SamplerOptions::batch`).
    held: SampleBatch,
    /// Stamps the quiet loop's samples in batch mode on the live root
    /// ([`TscClock`]); anchored by every other sample.
    tsc: Option<TscClock>,
}

impl Sampler {
    /// Opens /proc/stat and the counter groups (on the online CPUs as
    /// `cpus_from` lists them, the root itself when None): errors here
    /// are the command's start-up errors.
    pub fn open(
        opts: SamplerOptions,
        cpus_from: Option<&dyn Source>,
    ) -> Result<Sampler, ReadError> {
        let stat = PreadFile::open(&opts.root, stat::PATH)?;
        let hw = match opts.counters {
            CounterReads::Off => None,
            _ => match cpus_from {
                Some(src) => open_counters(&opts.root, src),
                None => open_counters(&opts.root, &RootFs::new(&opts.root)),
            },
        };
        if let (Some(s), Some(h)) = (&opts.series, &hw) {
            let c = h.counters();
            s.set_counters(c.opened().to_vec(), c.missing().to_vec());
        }
        Ok(Sampler {
            stat,
            parsed: ProcStat::default(),
            hw,
            tracker: None,
            sched: SchedSlot::live(opts.sched),
            held: SampleBatch::default(),
            tsc: None,
            opts,
        })
    }

    /// Starts from VMs the caller found already (from a side it read:
    /// [`HostTracker::start_from`]) instead of discovering them in `run`.
    pub fn with_host(mut self, tracker: (HostTracker, Option<ReadError>)) -> Sampler {
        self.tracker = Some(tracker);
        self
    }

    /// Runs the collector the caller started (record: before its first
    /// checkpoint, whose reading it is) instead of a new one.
    pub(crate) fn with_sched(mut self, slot: SchedSlot) -> Sampler {
        self.sched = slot;
        self
    }

    /// Counts the duration and the sampling grid from `start` (see
    /// `SamplerOptions::from`), fixed after opening.
    pub(crate) fn starting_at(mut self, start: Instant) -> Sampler {
        self.opts.from = Some(start);
        self
    }

    pub fn root(&self) -> &Path {
        &self.opts.root
    }

    /// The counter groups opened (and those that could not be), if any
    /// were tried.
    pub fn counters(&self) -> Option<&CpuCounters> {
        self.hw.as_ref().map(HwSampler::counters)
    }

    /// Samples at `rate` until stopped or the duration is over, then
    /// hands the subscriber its last checkpoint if it takes one.
    pub fn run(
        mut self,
        rate: &Rate,
        sub: &mut dyn Subscriber,
        stop: &dyn Wait,
    ) -> Result<Ended, ReadError> {
        let ended = self.run_loop(rate, sub, stop)?;
        self.deliver(sub)?;
        self.checkpoint(sub, Instant::now(), true)?;
        Ok(ended)
    }

    /// A checkpoint when the subscriber takes one now, with the
    /// collector's reading right before it.
    fn checkpoint(
        &mut self,
        sub: &mut dyn Subscriber,
        now: Instant,
        last: bool,
    ) -> Result<(), ReadError> {
        if sub.checkpoint_due(now, last) {
            self.deliver(sub)?;
            sub.checkpoint(self.sched.stored(End::Later))?;
        }
        Ok(())
    }

    fn run_loop(
        &mut self,
        rate: &Rate,
        sub: &mut dyn Subscriber,
        stop: &dyn Wait,
    ) -> Result<Ended, ReadError> {
        let mut st = self.start_loop(sub)?;
        let clock = stealscope_readers::clock::base();
        // One clock read per sample: t_ns and `now` are the same instant,
        // and the sleep is to an absolute deadline (clock::sleep_until).
        loop {
            let (t_ns, now) = match self.tsc.as_mut() {
                Some(c) => {
                    let ns = c.anchor();
                    (ns, clock.instant(ns))
                }
                None => clock.now(),
            };
            let last = st.ending.is_some();
            if let Some(p) = st.batch {
                self.hold(t_ns, &mut st.counters, last);
                if now >= st.next_batch || last {
                    self.deliver(sub)?;
                    st.next_batch = next_due(st.next_batch, p, now);
                }
            } else {
                self.sample_now(t_ns, now, &mut st.counters, last, sub)?;
            }
            self.scan_if_due(&mut st, now, sub)?;
            sub.tick(now)?;
            self.checkpoint(sub, now, false)?;
            if let Some(e) = st.ending {
                return Ok(e);
            }
            if let Some(e) = self.pace(&mut st, rate, stop, sub, now)? {
                return Ok(e);
            }
        }
    }

    /// Starts the host scans (when asked), the counter schedule and, in
    /// batch mode on the live root, the TSC clock; every deadline counts
    /// from the start.
    fn start_loop(&mut self, sub: &mut dyn Subscriber) -> Result<LoopState, ReadError> {
        let root = self.opts.root.clone();
        // Discovery reads every process: here, not on a caller's thread.
        let host = match (self.opts.host_every, self.tracker.take()) {
            (None, _) => None,
            (Some(_), Some((t, err))) => Some((t, err)),
            (Some(_), None) => Some(HostTracker::start(&root)),
        }
        .map(|(t, err)| sub.host_started(err).map(|()| t))
        .transpose()?;
        let start = self.opts.from.unwrap_or_else(Instant::now);
        let clock = stealscope_readers::clock::base();
        let counters = CounterSchedule::new(self.hw.take(), self.opts.counters, clock.ns(start));
        let batch = self.opts.batch.filter(|_| self.opts.series.is_none());
        if batch.is_some() && is_live_root(&root) {
            self.tsc = TscClock::open(&RootFs::new(&root));
        }
        Ok(LoopState {
            host,
            counters,
            batch,
            end: self.opts.duration.map(|d| start + d),
            next: start,
            next_host: start,
            next_watch: start + self.opts.watch_every.unwrap_or_default(),
            next_batch: start + batch.unwrap_or_default(),
            ending: None,
        })
    }

    /// Reads /proc/stat (and the counters when due) and hands the sample
    /// to the subscriber at once (no batch).
    fn sample_now(
        &mut self,
        t_ns: u64,
        now: Instant,
        counters: &mut CounterSchedule,
        last: bool,
        sub: &mut dyn Subscriber,
    ) -> Result<(), ReadError> {
        let keep_text = self.opts.series.is_some();
        match self.read_stat(keep_text) {
            Ok(text) => {
                let counters = counters.read(t_ns, last);
                if let (Some(s), Some(stat)) = (&self.opts.series, text) {
                    s.push(RawSample { t_ns, stat }, counters.clone());
                }
                sub.sample(Sample {
                    t_ns,
                    now,
                    stat: &self.parsed,
                    counters: counters.as_ref(),
                })?;
            }
            Err(e) => sub.sample_error(e)?,
        }
        Ok(())
    }

    /// A host scan when one is due, looking for new VMs when that is due
    /// too.
    fn scan_if_due(
        &mut self,
        st: &mut LoopState,
        now: Instant,
        sub: &mut dyn Subscriber,
    ) -> Result<(), ReadError> {
        if let (Some(host), Some(every)) = (st.host.as_mut(), self.opts.host_every) {
            if now >= st.next_host {
                let watch = match self.opts.watch_every {
                    None => true,
                    Some(p) if now >= st.next_watch => {
                        st.next_watch = next_due(st.next_watch, p, now);
                        true
                    }
                    Some(_) => false,
                };
                self.scan(host, watch, sub)?;
                st.next_host = next_due(st.next_host, every, now);
            }
        }
        Ok(())
    }

    /// Sets the next sample's deadline and sleeps until it (taking held
    /// samples quietly meanwhile in batch mode); Some when the loop ends
    /// now, else with `st.ending` set when the next sample is the last.
    fn pace(
        &mut self,
        st: &mut LoopState,
        rate: &Rate,
        stop: &dyn Wait,
        sub: &mut dyn Subscriber,
        mut now: Instant,
    ) -> Result<Option<Ended>, ReadError> {
        let period = rate.period();
        st.next = next_due(st.next, period, now);
        // Held samples until the next one due with anything else: the
        // path of nearly every sample in batch mode (`quiet`), with a
        // stop flag the loop can check itself (record's).
        let flag = stop.flag().filter(|_| self.opts.wake_every.is_none());
        if let (Some(_), Some(flag), Some(t)) = (st.batch, flag, sub.next_tick()) {
            let host_due = st.host.as_ref().map(|_| st.next_host);
            let until = [Some(st.next_batch), host_due, Some(t), st.end]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(t);
            now = self.quiet(&mut st.next, until, period, &mut st.counters, flag, now);
        }
        if let Some(e) = st.end.filter(|&e| st.next > e || now >= e) {
            // The last sample at the end itself, unless this one was.
            if !self.opts.last_at_end || now >= e {
                return Ok(Some(Ended::Duration));
            }
            (st.next, st.ending) = (e, Some(Ended::Duration));
        }
        if self.wait(st.next, stop, sub)? {
            if !self.opts.last_at_end {
                return Ok(Some(Ended::Stopped));
            }
            st.ending = Some(Ended::Stopped);
        }
        Ok(None)
    }

    /// Takes and holds samples at `period` while the next one is due
    /// before `until`, with nothing else in between: no subscriber call,
    /// no scan, no parse, no `Instant`. Why: at 100 Hz each sample wakes on
    /// cold caches and TLBs (a VM's nested paging makes each miss dear),
    /// so the less code and data a sample touches the less it costs; this
    /// loop checks the stop flag, sleeps through libc, reads the TSC
    /// ([`TscClock`]) and preads the stat file straight into the batch
    /// ([`SampleBatch::hold_read`]). Returns the time of its last sample
    /// (`now` if it took none); leaves on a stop unslept, for the caller's
    /// `wait` to see it.
    fn quiet(
        &mut self,
        next: &mut Instant,
        until: Instant,
        period: Duration,
        counters: &mut CounterSchedule,
        stop: &AtomicBool,
        now: Instant,
    ) -> Instant {
        let clock = stealscope_readers::clock::base();
        let (until, period) = (clock.ns(until), period.as_nanos() as u64);
        let (mut next_ns, mut t_ns) = (clock.ns(*next), clock.ns(now));
        while next_ns < until && !stop.load(Ordering::Relaxed) {
            sleep_until_ns(next_ns);
            let t = match self.tsc.as_ref().and_then(TscClock::now_ns) {
                Some(ns) => ns,
                None => monotonic_ns(),
            };
            // Woken late, at or past `until`: this sample is due with the
            // work there (a scan, a tick, the end). Leave it to the caller,
            // with `next` the deadline just passed, so its `wait` returns
            // at once and the sample is taken with that work.
            if t >= until {
                break;
            }
            t_ns = t;
            self.hold(t_ns, counters, false);
            next_ns = next_due_ns(next_ns, period, t_ns);
        }
        *next = clock.instant(next_ns);
        clock.instant(t_ns)
    }

    /// Reads /proc/stat and holds the read for the next delivery, with
    /// the counters when due (only with a read that worked).
    #[inline]
    fn hold(&mut self, t_ns: u64, counters: &mut CounterSchedule, last: bool) {
        self.held
            .hold_read(t_ns, &mut self.stat, || counters.read(t_ns, last));
    }

    /// A host scan, with the collector read right before it.
    fn scan(
        &mut self,
        host: &mut HostTracker,
        watch: bool,
        sub: &mut dyn Subscriber,
    ) -> Result<(), ReadError> {
        // The collector is read right before each scan, so its intervals
        // are the scans' (schedstat bounds them) and a 100 Hz recording
        // does not pay for 100 reads a second.
        self.deliver(sub)?;
        if let Some(r) = self.sched.read() {
            // Shared, not copied: at 10,000 watched threads a sample is
            // tens of MB and every subscriber keeps two.
            let r = r.map(Arc::new);
            sub.sched(r.as_ref().map_err(String::clone))?;
        }
        let r = host.scan(&self.opts.root, watch);
        self.sched.watch(host);
        // Stamped at the reads, not before the collector's read and the
        // VMM check: schedstat deltas are over the reads' times.
        sub.host(host.read_ns(), host, r)
    }

    /// Hands the held reads to the subscriber, in order.
    fn deliver(&mut self, sub: &mut dyn Subscriber) -> Result<(), ReadError> {
        if self.held.is_empty() {
            return Ok(());
        }
        self.held.deliver(&mut self.parsed, |d| match d {
            Delivered::Sample {
                t_ns,
                now,
                stat,
                counters,
            } => sub.sample(Sample {
                t_ns,
                now,
                stat,
                counters,
            }),
            Delivered::Error(e) => sub.sample_error(e),
        })
    }

    /// Sleeps until `next`, waking every `wake_every` to tick; true when
    /// told to stop.
    fn wait(
        &self,
        next: Instant,
        stop: &dyn Wait,
        sub: &mut dyn Subscriber,
    ) -> Result<bool, ReadError> {
        let Some(wake) = self.opts.wake_every else {
            return Ok(stop.wait_until(next));
        };
        loop {
            let until = next.min(Instant::now() + wake);
            if stop.wait_until(until) {
                return Ok(true);
            }
            if until >= next {
                return Ok(false);
            }
            sub.tick(Instant::now())?;
        }
    }

    /// Reads and parses the cpu rows; with `keep_text`, returns them as
    /// text too (what samples.jsonl stores).
    fn read_stat(&mut self, keep_text: bool) -> Result<Option<String>, ReadError> {
        let bytes = self.stat.read()?;
        stat::parse_cpu_rows(bytes, stat::PATH, &mut self.parsed)?;
        if !keep_text {
            return Ok(None);
        }
        let text = std::str::from_utf8(&bytes[..stat::cpu_block_end(bytes)])
            .map_err(|_| ReadError::parse(stat::PATH, "not text"))?;
        Ok(Some({
            let end: usize = text
                .split_inclusive('\n')
                .take_while(|l| l.starts_with("cpu"))
                .map(str::len)
                .sum();
            text[..end].to_string()
        }))
    }
}
