//! A recording turned into what the rest of stealscope reads: a
//! [`Snapshot`] (t0 = the first checkpoint, t1 = the last complete one, the
//! /proc/stat series and counter reads between them) for the doctor rules
//! and [`MachineModel`](crate::MachineModel), and a [`Timeline`] of the
//! series a snapshot does not hold (interrupts, vCPU waits, probe windows).

use crate::exact_steal::TaskExact;
use crate::host::sched_store::SCHED_FILE;
use crate::irq_rates::rates;
use crate::timeline::{
    CulpritWindow, IrqWindow, ProbeWindow, StealMark, StealRoute, Timeline, VcpuWindow,
};
use std::collections::BTreeMap;
use std::path::Path;
use stealscope_readers::damage::{Damage, FileKind};
use stealscope_readers::kvmclock::{kvm_between, KvmClockAnchor};
use stealscope_readers::perf::{CounterCapture, CounterSample};
use stealscope_readers::process::task_schedstat_path;
use stealscope_readers::recording::{
    CulpritScan, Header, IrqSample, KvmClockInfo, ProbeRecord, Record, RecordingReader, StatSample,
    StealEpisodeRecord, StealSource, VcpuSample,
};
use stealscope_readers::snapshot::{self, Hardware, Meta, RawSample, Snapshot};
use stealscope_readers::{stat, MemFs, ReadError};
use stealscope_who::Charge;

#[derive(Debug, Clone)]
pub struct Recording {
    pub header: Header,
    pub snapshot: Snapshot,
    pub timeline: Timeline,
    /// The end frame was read: the recorder finished cleanly.
    pub complete: bool,
    pub checkpoints: usize,
    /// /proc/stat samples in the file (also those outside t0..t1).
    pub stat_samples: usize,
}

type Files = BTreeMap<String, Vec<u8>>;

/// Everything read from the file, before it is cut to t0..t1.
#[derive(Default)]
struct Raw {
    first: Option<(u64, Files)>,
    last: Option<(u64, Files)>,
    checkpoints: usize,
    stat: Vec<StatSample>,
    /// Windows with their absolute start (start_s is set once t0 is known).
    irq: Vec<(u64, IrqWindow)>,
    prev_irq: Option<IrqSample>,
    vcpu: Vec<(u64, VcpuWindow)>,
    prev_vcpu: Option<VcpuSample>,
    counters: Vec<CounterSample>,
    probes: Vec<ProbeRecord>,
    culprits: Vec<CulpritScan>,
    steal: Vec<StealEpisodeRecord>,
    notes: Vec<(u64, String)>,
    unknown: usize,
    complete: bool,
    /// kvm-clock anchors at the start (header) and the end (end frame).
    kvm: (Option<KvmClockAnchor>, Option<KvmClockAnchor>),
}

impl Raw {
    fn add(&mut self, rec: Record) {
        match rec {
            Record::Checkpoint { t_ns, files } => {
                self.checkpoints += 1;
                if self.first.is_none() {
                    self.first = Some((t_ns, files));
                } else {
                    self.last = Some((t_ns, files));
                }
            }
            Record::Stat(s) => self.stat.extend(s),
            Record::Irq(samples) => {
                for s in samples {
                    if let Some(p) = &self.prev_irq {
                        if s.t_ns > p.t_ns {
                            let wall = (s.t_ns - p.t_ns) as f64 / 1e9;
                            let cpus = rates(&p.irq, &s.irq, wall);
                            self.irq.push((
                                p.t_ns,
                                IrqWindow {
                                    start_s: 0.0,
                                    wall_s: wall,
                                    cpus,
                                },
                            ));
                        }
                    }
                    self.prev_irq = Some(s);
                }
            }
            Record::Vcpu(samples) => {
                for s in samples {
                    if let Some(p) = self.prev_vcpu.take() {
                        self.add_vcpu_windows(&p, &s);
                    }
                    self.prev_vcpu = Some(s);
                }
            }
            Record::Counters(c) => self.counters.extend(c),
            Record::Probes(p) => self.probes.extend(p),
            Record::Culprits(c) => self.culprits.extend(c),
            Record::Steal(e) => self.steal.extend(e),
            Record::Note { t_ns, text } => self.notes.push((t_ns, text)),
            Record::End(e) => {
                self.complete = true;
                self.kvm.1 = e.kvm_clock;
            }
            Record::Unknown { .. } => self.unknown += 1,
        }
    }

    fn add_vcpu_windows(&mut self, p: &VcpuSample, s: &VcpuSample) {
        if s.t_ns <= p.t_ns {
            return;
        }
        for (e, t) in &s.threads {
            let Some((_, pt)) = p
                .threads
                .iter()
                .find(|(pe, _)| pe.pid == e.pid && pe.tid == e.tid)
            else {
                continue;
            };
            // A thread id reused by another thread starts again from 0.
            let (Some(run), Some(wait)) = (
                t.run_ns.checked_sub(pt.run_ns),
                t.wait_ns.checked_sub(pt.wait_ns),
            ) else {
                continue;
            };
            self.vcpu.push((
                p.t_ns,
                VcpuWindow {
                    start_s: 0.0,
                    wall_s: (s.t_ns - p.t_ns) as f64 / 1e9,
                    vm: e.vm.clone(),
                    vcpu: e.vcpu,
                    run_s: run as f64 / 1e9,
                    wait_s: wait as f64 / 1e9,
                },
            ));
        }
    }
}

/// Reads a recording; a cut-off tail is a note and the recording's
/// [`Damage`], anything else wrong an error.
pub fn open(path: &Path) -> Result<Recording, ReadError> {
    let name = path.display().to_string();
    let mut r = RecordingReader::open(path)?;
    let header = r.header().clone();
    let mut raw = Raw::default();
    while let Some(rec) = r.next_record()? {
        raw.add(rec);
    }
    let mut notes = Vec::new();
    let cut = if let Some(why) = r.truncation() {
        notes.push(format!(
            "recording cut off ({why}); read up to the last complete record at offset {}",
            r.offset()
        ));
        Some(Cut {
            why: why.to_string(),
            bytes_lost: Some(r.file_len() - r.offset()),
        })
    } else if !raw.complete {
        notes.push(
            "recording has no end frame (the recorder was stopped without finishing); read up to its last frame"
                .to_string(),
        );
        Some(Cut {
            why: "it has no end frame (the recorder was stopped without finishing)".into(),
            bytes_lost: None,
        })
    } else {
        None
    };
    if raw.unknown > 0 {
        notes.push(format!(
            "skipped {} frames of kinds this build does not know (written by a newer stealscope)",
            raw.unknown
        ));
    }
    build(&name, header, raw, notes, cut)
}

/// How a recording ends early, as its reader found it.
struct Cut {
    why: String,
    bytes_lost: Option<u64>,
}

/// When the file holds one checkpoint only (cut off within the first
/// checkpoint period), t1 is t0 with the last sample's cpu rows, the
/// uptime advanced to it and each vCPU thread's schedstat from the vCPU
/// series at the same moment (else its vCPUs would read 0 % steal). What
/// only a checkpoint holds (the collector's reading, other processes'
/// times) is not known at t1: the collector's file says so.
fn synthetic_t1(t0: &Files, t0_ns: u64, last: &StatSample, vcpu: Option<&VcpuSample>) -> Files {
    let mut files = t0.clone();
    let rows = stat::render_cpu_lines(&last.stat);
    let rest = t0
        .get(stat::PATH)
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(|t| {
            t.split_inclusive('\n')
                .skip_while(|l| l.starts_with("cpu"))
                .collect::<String>()
        })
        .unwrap_or_default();
    files.insert(stat::PATH.to_string(), format!("{rows}{rest}").into_bytes());
    let uptime = t0
        .get("/proc/uptime")
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(|t| t.split_whitespace().map(str::to_string).collect::<Vec<_>>());
    if let Some([up, idle, ..]) = uptime.as_deref() {
        if let Ok(up) = up.parse::<f64>() {
            let dt = last.t_ns.saturating_sub(t0_ns) as f64 / 1e9;
            files.insert(
                "/proc/uptime".to_string(),
                format!("{:.2} {idle}\n", up + dt).into_bytes(),
            );
        }
    }
    if vcpu.is_none() {
        // No scan after t0: t0's thread times copied to t1 would read as
        // threads that neither ran nor waited (0 % steal). Without them the
        // model leaves the vCPUs unmeasured instead (issue 28).
        files.retain(|path, _| !is_task_schedstat(path));
    }
    for (e, t) in vcpu.map(|v| v.threads.as_slice()).unwrap_or_default() {
        let path = task_schedstat_path(e.pid, e.tid);
        // The times-run count is not in the series: t0's stands.
        let slices = files
            .get(&path)
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|t| t.split_whitespace().nth(2).map(str::to_string))
            .unwrap_or_else(|| "0".into());
        let text = format!("{} {} {slices}\n", t.run_ns, t.wait_ns);
        files.insert(path, text.into_bytes());
    }
    if files.contains_key(SCHED_FILE) {
        let why = "the recording is cut off before its second checkpoint: no collector reading at its end";
        let v = serde_json::json!({ "unavailable": [why] });
        files.insert(SCHED_FILE.to_string(), v.to_string().into_bytes());
    }
    files
}

/// `/proc/PID/task/TID/schedstat`.
fn is_task_schedstat(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    matches!(parts.as_slice(), ["", "proc", _, "task", _, "schedstat"])
}

/// The end of a recording that holds one checkpoint: its last vCPU scan
/// with the last /proc/stat sample at or before it (so both cover the same
/// interval), else its last /proc/stat sample.
fn synthetic_end(raw: &Raw, t0_ns: u64) -> Option<(&StatSample, Option<&VcpuSample>)> {
    let stat_at = |limit: u64| {
        raw.stat
            .iter()
            .rev()
            .find(|s| s.t_ns > t0_ns && s.t_ns <= limit)
    };
    if let Some(v) = raw.prev_vcpu.as_ref().filter(|v| v.t_ns > t0_ns) {
        if let Some(s) = stat_at(v.t_ns) {
            return Some((s, Some(v)));
        }
    }
    stat_at(u64::MAX).map(|s| (s, None))
}

/// The last moment any series of the file reaches.
fn last_data_ns(raw: &Raw, t0_ns: u64) -> u64 {
    let stat = raw.stat.last().map_or(0, |s| s.t_ns);
    let vcpu = raw.prev_vcpu.as_ref().map_or(0, |s| s.t_ns);
    let ckpt = raw.last.as_ref().map_or(0, |(t, _)| *t);
    stat.max(vcpu).max(ckpt).max(t0_ns)
}

/// What a cut-off recording lost, for the report's verdict.
fn damage(cut: Cut, header: &Header, cut_at_s: f64, consequences: Vec<String>) -> Damage {
    Damage {
        file: FileKind::Recording,
        cut_at_s: Some(cut_at_s),
        intended_s: header.duration_s,
        bytes_lost: cut.bytes_lost,
        bytes_expected: None,
        why: cut.why,
        consequences,
    }
}

/// t1 of a recording: its last complete checkpoint, else (one checkpoint)
/// a side built from the last samples ([`synthetic_t1`]); what the report
/// then leaves out goes to `lost`.
fn end_side(
    name: &str,
    raw: &mut Raw,
    (t0_ns, t0): (u64, &Files),
    cut: Option<&Cut>,
    notes: &mut Vec<String>,
    lost: &mut Vec<String>,
) -> Result<(u64, Files), ReadError> {
    let end_ns = last_data_ns(raw, t0_ns);
    if let Some((t, f)) = raw.last.take().filter(|(t, _)| *t > t0_ns) {
        if end_ns > t {
            lost.push(format!(
                "figures end at the last complete checkpoint (+{:.1} s); the {:.1} s after it are in the series only",
                (t - t0_ns) as f64 / 1e9,
                (end_ns - t) as f64 / 1e9
            ));
        }
        return Ok((t, f));
    }
    let (last, vcpu) = synthetic_end(raw, t0_ns).ok_or_else(|| {
        let why = cut.map_or(String::new(), |c| format!("cut off ({}): ", c.why));
        ReadError::parse(
            name,
            format!("{why}one checkpoint and no /proc/stat sample after it: nothing to analyse"),
        )
    })?;
    notes.push(format!(
        "the recording ends before its second checkpoint: t1 is its last /proc/stat sample (+{:.1} s){}; the other files are as at the start",
        (last.t_ns - t0_ns) as f64 / 1e9,
        if vcpu.is_some() { " with the vCPU threads' times of the scan then" } else { "" }
    ));
    if vcpu.is_none() && t0.keys().any(|p| is_task_schedstat(p)) {
        lost.push(
            "vCPU and thread times need a vCPU scan after the first checkpoint: not measured"
                .to_string(),
        );
    }
    if t0.contains_key(SCHED_FILE) || vcpu.is_some() {
        lost.push("other host work and the collector's attribution need a second checkpoint: not measured (the culprits per scan are kept)".to_string());
    }
    Ok((last.t_ns, synthetic_t1(t0, t0_ns, last, vcpu)))
}

fn build(
    name: &str,
    header: Header,
    mut raw: Raw,
    mut notes: Vec<String>,
    cut: Option<Cut>,
) -> Result<Recording, ReadError> {
    let (t0_ns, t0) = first_side(name, &mut raw, cut.as_ref())?;
    let end_ns = last_data_ns(&raw, t0_ns);
    let mut lost = Vec::new();
    let (t1_ns, t1) = end_side(
        name,
        &mut raw,
        (t0_ns, &t0),
        cut.as_ref(),
        &mut notes,
        &mut lost,
    )?;
    let damage = cut.map(|c| damage(c, &header, (end_ns - t0_ns) as f64 / 1e9, lost));
    let stat_samples = raw.stat.len();
    let samples = samples_inside(&raw, t0_ns, t1_ns, &mut notes);
    let span = Span {
        t0_ns,
        t1_ns,
        origin: samples.first().map_or(t0_ns, |s| s.t_ns),
    };
    raw.kvm.0 = header.kvm_clock.as_ref().and_then(|k| k.anchor());
    if let Some(KvmClockInfo::Unavailable { reason }) = &header.kvm_clock {
        notes.push(format!("no kvm-clock times: {reason}"));
    }
    let mut timeline = timeline(&mut raw, span, notes);
    timeline.steal = Some(steal_route(&header));
    let hardware = Hardware {
        cpuid: header.cpuid.clone(),
        counters: header.counters.as_ref().map(|c| CounterCapture {
            opened: c.opened.clone(),
            missing: c.missing.clone(),
            samples: std::mem::take(&mut raw.counters)
                .into_iter()
                .filter(|s| span.inside(s.t_ns))
                .collect(),
        }),
    };
    let side = |files: Files, which: &str| MemFs {
        files,
        name: format!("{name}/{which}"),
    };
    let snapshot = Snapshot {
        meta: meta(&header, t0_ns, t1_ns),
        t0: side(t0, "t0"),
        t1: side(t1, "t1"),
        samples,
        hardware,
        damage,
    };
    Ok(Recording {
        header,
        snapshot,
        timeline,
        complete: raw.complete,
        checkpoints: raw.checkpoints,
        stat_samples,
    })
}

/// The first complete checkpoint, or why there is nothing to analyse.
fn first_side(name: &str, raw: &mut Raw, cut: Option<&Cut>) -> Result<(u64, Files), ReadError> {
    raw.first.take().ok_or_else(|| {
        let why = cut.map_or(String::new(), |c| format!("cut off ({}): ", c.why));
        ReadError::parse(
            name,
            format!("{why}no complete checkpoint: nothing to analyse"),
        )
    })
}

/// The interval the snapshot covers, and the time line's origin (its
/// first /proc/stat sample).
#[derive(Clone, Copy)]
struct Span {
    t0_ns: u64,
    t1_ns: u64,
    origin: u64,
}

impl Span {
    fn inside(&self, t: u64) -> bool {
        t >= self.t0_ns && t <= self.t1_ns
    }

    fn ends_inside(&self, a: u64, wall_s: f64) -> bool {
        self.inside(a) && self.inside(a + (wall_s * 1e9) as u64)
    }

    /// Seconds from the origin.
    fn rel(&self, t: u64) -> f64 {
        rel_to(self.origin, t)
    }
}

/// The /proc/stat samples between the checkpoints; those after the last
/// are left out with a note.
fn samples_inside(raw: &Raw, t0_ns: u64, t1_ns: u64, notes: &mut Vec<String>) -> Vec<RawSample> {
    let after = raw.stat.iter().filter(|s| s.t_ns > t1_ns).count();
    if after > 0 {
        notes.push(format!(
            "{after} /proc/stat samples after the last complete checkpoint (+{:.1} s) are left out",
            (t1_ns - t0_ns) as f64 / 1e9
        ));
    }
    raw.stat
        .iter()
        .filter(|s| s.t_ns >= t0_ns && s.t_ns <= t1_ns)
        .map(|s| RawSample {
            t_ns: s.t_ns,
            stat: stat::render_cpu_lines(&s.stat),
        })
        .collect()
}

/// The windows, probes, culprits and notes inside `span`, timed from its
/// origin; the recorder's own notes follow `notes`.
fn timeline(raw: &mut Raw, span: Span, mut notes: Vec<String>) -> Timeline {
    for (t, text) in std::mem::take(&mut raw.notes) {
        notes.push(format!("recorder at +{:.1} s: {text}", span.rel(t)));
    }
    Timeline {
        irq: std::mem::take(&mut raw.irq)
            .into_iter()
            .filter(|(a, w)| span.ends_inside(*a, w.wall_s))
            .map(|(a, w)| IrqWindow {
                start_s: span.rel(a),
                ..w
            })
            .collect(),
        vcpu: std::mem::take(&mut raw.vcpu)
            .into_iter()
            .filter(|(a, w)| span.ends_inside(*a, w.wall_s))
            .map(|(a, w)| VcpuWindow {
                start_s: span.rel(a),
                ..w
            })
            .collect(),
        probes: std::mem::take(&mut raw.probes)
            .into_iter()
            .filter(|p| span.inside(p.start_ns))
            .map(|p| probe_window(p, span))
            .collect(),
        culprits: std::mem::take(&mut raw.culprits)
            .into_iter()
            .filter(|c| span.inside(c.t_ns))
            .flat_map(|c| culprit_windows(c, span))
            .collect(),
        steal: None,
        steal_episodes: std::mem::take(&mut raw.steal)
            .into_iter()
            .filter(|e| span.inside(e.t_ns))
            .map(|e| steal_mark(e, span, raw.kvm))
            .collect(),
        notes,
    }
}

/// What the header says of how steal was measured; a recording from
/// before the header said it polled.
fn steal_route(h: &Header) -> StealRoute {
    let stat_hz = h.rate_hz;
    match &h.steal {
        Some(StealSource::Exact { threshold_ns, .. }) => StealRoute::Exact {
            threshold_ns: *threshold_ns,
            stat_hz,
        },
        Some(StealSource::ProcStat { reason }) => StealRoute::ProcStat {
            stat_hz,
            reason: reason.clone(),
        },
        None => StealRoute::ProcStat {
            stat_hz,
            reason: "recorded by a stealscope without exact steal".into(),
        },
    }
}

/// An episode on the time line, with its kvm-clock time when the recording
/// anchored kvm-clock (between the start and end anchors).
fn steal_mark(
    e: StealEpisodeRecord,
    span: Span,
    kvm: (Option<KvmClockAnchor>, Option<KvmClockAnchor>),
) -> StealMark {
    StealMark {
        t_s: span.rel(e.t_ns),
        kvmclock_ns: kvm.0.map(|a| kvm_between(&a, kvm.1.as_ref(), e.t_ns)),
        cpu: e.cpu,
        ns: e.ns,
        victim: e.victim.map(|v| TaskExact {
            pid: v.pid,
            tid: v.tid,
            comm: v.comm,
            thread: None,
            busy_ns: e.ns,
            episodes: 1,
        }),
    }
}

/// A probe record in the time line's units (seconds, microseconds).
fn probe_window(p: ProbeRecord, span: Span) -> ProbeWindow {
    ProbeWindow {
        start_s: span.rel(p.start_ns),
        wall_s: p.wall_ns as f64 / 1e9,
        probe: p.probe,
        cpu: p.cpu,
        samples: p.samples,
        p50_us: p.p50_ns as f64 / 1e3,
        p99_us: p.p99_ns as f64 / 1e3,
        max_us: p.max_ns as f64 / 1e3,
        buckets: p
            .buckets
            .into_iter()
            .map(|(le, n)| (le as f64 / 1e3, n))
            .collect(),
    }
}

/// One culprit scan as a window per VM, times in seconds.
fn culprit_windows(c: CulpritScan, span: Span) -> impl Iterator<Item = CulpritWindow> {
    let t_s = span.rel(c.t_ns);
    c.vms.into_iter().map(move |(vm, rows)| {
        let total: u64 = rows.iter().map(|r| r.1).sum();
        CulpritWindow {
            t_s,
            vm,
            culprits: rows
                .into_iter()
                .map(|(c, ns)| Charge::of(c, ns, total))
                .collect(),
        }
    })
}

/// The snapshot's meta: the checkpoints' interval and the header's facts.
fn meta(header: &Header, t0_ns: u64, t1_ns: u64) -> Meta {
    Meta {
        format: snapshot::FORMAT.to_string(),
        interval_s: (t1_ns - t0_ns) as f64 / 1e9,
        hostname: header.hostname.clone(),
        taken_unix_s: Some(header.start_unix_s + rel_to(header.start_mono_ns, t0_ns)),
        clk_tck: header.clk_tck,
        kernel: header.kernel.clone(),
        stealscope_version: header.stealscope_version.clone(),
        sample_hz: Some(header.rate_hz),
    }
}

fn rel_to(origin: u64, t: u64) -> f64 {
    (t as f64 - origin as f64) / 1e9
}

/// A snapshot (directory or .tar.gz) or a recording (told by its magic) as
/// a snapshot, with what the source says about itself.
pub fn open_snapshot(path: &Path) -> Result<(Snapshot, Vec<String>), ReadError> {
    if stealscope_readers::recording::is_recording(path) {
        let r = open(path)?;
        Ok((r.snapshot, r.timeline.notes))
    } else {
        Ok((snapshot::open(path)?, Vec::new()))
    }
}
