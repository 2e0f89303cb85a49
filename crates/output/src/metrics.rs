//! Prometheus exposition of `serve`'s state (docs/contract.md, "Prometheus metrics"),
//! encoded by prometheus-client: OpenMetrics text for Prometheus, and the
//! classic text format (0.0.4) for everyone else (curl, `promtool check
//! metrics`, node_exporter's textfile collector). Families without series
//! are left out, so a guest shows no vCPU families and a VM that is gone
//! leaves no series behind.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use stealscope_analysis::Severity;
use stealscope_model::cputime::MODES;
use stealscope_model::host::running_wait_by::{episode_buckets, RunningWaitBy};
use stealscope_model::host::VcpuTimes;
use stealscope_model::running::RunningCpuTimes;
use stealscope_model::running_exact_steal::RunningExactSteal;
use stealscope_model::running_hw::RunningHw;
use stealscope_readers::perf::{Counter, Missing, Reason};

mod fleet;
mod guest_steal;
pub use fleet::{HostFacts, VmFacts, FLEET_FAMILIES};
pub use guest_steal::{GUEST_STEAL_FAMILIES, OTHER};

/// Everything `serve` exports, updated by its sampler and rule runs.
#[derive(Debug, Default)]
pub struct MetricsState {
    pub cpu: RunningCpuTimes,
    /// vCPU threads of the last host scan (empty on a guest).
    pub vcpus: Vec<VcpuTimes>,
    /// Findings of the last rule run: (id, severity), without repeats.
    pub findings: Vec<(String, Severity)>,
    /// Its host.noisy-neighbor findings (crate::metrics_noisy).
    pub noisy: Vec<crate::metrics_noisy::NoisyNeighbor>,
    /// Hardware counter totals per CPU (empty when none opened).
    pub hw: RunningHw,
    /// Counters that could not be opened, and why.
    pub hw_missing: Vec<Missing>,
    /// Each VM's vCPU wait by culprit (scheduler-event collector).
    pub wait_by: RunningWaitBy,
    /// The collector's route and health; None until it was tried (on a
    /// host, at the first scan that finds vCPU threads).
    pub sched: Option<SchedStatus>,
    /// This machine's name and NUMA nodes (fleet families).
    pub host: HostFacts,
    /// Each VM's identity and size, from the last host scan.
    pub vm_facts: Vec<VmFacts>,
    /// Exact guest steal (the BPF collector), or why /proc/stat's only.
    pub exact: RunningExactSteal,
}

/// Which scheduler-event route runs, or why none does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedStatus {
    /// "bpf", "tracefs" or "none".
    pub route: String,
    /// Why none runs (empty when one does).
    pub reason: String,
    pub events: u64,
    pub lost_events: u64,
    /// Waits longer than the BPF route's per-CPU record.
    pub overflows: u64,
    /// Threads the collector could not watch (its map full).
    pub unwatched: u64,
}

pub type SharedState = Arc<Mutex<MetricsState>>;

/// Metric family names as they appear on the wire (with the suffixes the
/// classic format adds), for tests of the shipped rules and dashboard.
pub const FAMILIES: [(&str, &str); 17] = [
    ("stealscope_cpu_seconds_total", "counter"),
    ("stealscope_stat_anomalies_total", "counter"),
    ("stealscope_steal_window_ratio", "histogram"),
    ("stealscope_vcpu_wait_seconds_total", "counter"),
    ("stealscope_vcpu_run_seconds_total", "counter"),
    ("stealscope_finding", "gauge"),
    ("stealscope_cpu_hw_events_total", "counter"),
    ("stealscope_hw_event_unavailable", "gauge"),
    ("stealscope_build_info", "gauge"),
    ("stealscope_vm_wait_by_seconds_total", "counter"),
    ("stealscope_vcpu_wait_episode_seconds", "histogram"),
    ("stealscope_sched_route_info", "gauge"),
    ("stealscope_sched_events_total", "counter"),
    ("stealscope_sched_events_lost_total", "counter"),
    ("stealscope_noisy_neighbor", "gauge"),
    ("stealscope_sched_overflows_total", "counter"),
    ("stealscope_sched_unwatched_threads", "gauge"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// Picks by the Accept header: OpenMetrics when the client ranks it at
    /// least as high as the classic format, else the classic format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut om, mut text) = (0.0f64, 0.0f64);
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

pub struct Exporter {
    registry: Registry,
}

impl Exporter {
    pub fn new(state: SharedState, version: &'static str) -> Exporter {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(StateCollector { state, version }));
        Exporter { registry }
    }

    pub fn encode(&self, format: Format) -> String {
        let mut om = String::with_capacity(4096);
        // Writing into a String does not fail, nor does our collector.
        let _ = prometheus_client::encoding::text::encode(&mut om, &self.registry);
        match format {
            Format::OpenMetrics => om,
            Format::Text => to_classic(&om),
        }
    }
}

#[derive(Debug)]
struct StateCollector {
    state: SharedState,
    version: &'static str,
}

impl Collector for StateCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        encode_state(&s, self.version, &mut enc)
    }
}

type Labels = Vec<(&'static str, String)>;

/// Seconds to the microsecond: sums of tick deltas pick up float noise
/// (3373.8699999999978); rounding is monotonic, so counters stay so.
fn secs(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// One family of constant metrics; nothing at all when it has no series.
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, M)>,
) -> fmt::Result {
    let mut series = series.into_iter().peekable();
    let Some((_, first)) = series.peek() else {
        return Ok(());
    };
    let mut m = enc.encode_descriptor(name, help, None, first.metric_type())?;
    for (labels, metric) in series {
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn encode_state(s: &MetricsState, version: &str, enc: &mut DescriptorEncoder) -> fmt::Result {
    encode_cpus(s, enc)?;
    guest_steal::encode_guest_steal(&s.exact, enc)?;
    encode_vcpus(s, enc)?;
    encode_wait_by(s, enc)?;
    fleet::encode_fleet(&s.host, s.cpu.cpus.len(), &s.vm_facts, enc)?;
    encode_hw(s, enc)?;
    encode_findings(s, version, enc)
}

/// Per CPU: seconds per mode, counter anomalies, steal per window span.
fn encode_cpus(s: &MetricsState, enc: &mut DescriptorEncoder) -> fmt::Result {
    let cpus = &s.cpu.cpus;
    family(
        enc,
        "stealscope_cpu_seconds",
        "Seconds each CPU spent in each mode (/proc/stat); never decreases: kernel counters that go backwards or jump past wall time are clamped.",
        cpus.iter().flat_map(|(cpu, c)| {
            let values = c.secs.values();
            (0..MODES.len()).filter(|i| c.present[*i]).map(move |i| {
                (
                    vec![("cpu", cpu.to_string()), ("mode", MODES[i].to_string())],
                    ConstCounter::new(secs(values[i])),
                )
            })
        }),
    )?;
    family(
        enc,
        "stealscope_stat_anomalies",
        "Windows in which a /proc/stat counter of this CPU went backwards or advanced more than wall time (clamped).",
        cpus.iter()
            .map(|(cpu, c)| (vec![("cpu", cpu.to_string())], ConstCounter::new(c.anomalies))),
    )?;
    let with_windows = cpus.iter().filter(|(_, c)| c.steal_windows.count > 0);
    if with_windows.clone().next().is_some() {
        let mut m = enc.encode_descriptor(
            "stealscope_steal_window_ratio",
            "Steal share of each span of sampling windows at least ~100 ms long (one window at the default 10 Hz), so that bursts survive a long scrape interval and one 10 ms counter unit is not a 100 % window.",
            None,
            MetricType::Histogram,
        )?;
        for (cpu, c) in with_windows {
            let h = &c.steal_windows;
            let labels = [("cpu", cpu.to_string())];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                secs(h.sum),
                h.count,
                &h.buckets(),
                None,
            )?;
        }
    }
    Ok(())
}

/// Per vCPU thread: run-queue wait and run time.
fn encode_vcpus(s: &MetricsState, enc: &mut DescriptorEncoder) -> fmt::Result {
    let vcpu_labels = |v: &VcpuTimes| vec![("vm", v.vm.clone()), ("vcpu", v.vcpu.to_string())];
    family(
        enc,
        "stealscope_vcpu_wait_seconds",
        "Run-queue wait of each vCPU thread (schedstat): the steal its guest is told about.",
        s.vcpus
            .iter()
            .map(|v| (vcpu_labels(v), ConstCounter::new(secs(v.wait_s)))),
    )?;
    family(
        enc,
        "stealscope_vcpu_run_seconds",
        "Time each vCPU thread ran on a host CPU (schedstat).",
        s.vcpus
            .iter()
            .map(|v| (vcpu_labels(v), ConstCounter::new(secs(v.run_s)))),
    )?;
    Ok(())
}

/// Hardware events per CPU, and the counters this machine lacks.
fn encode_hw(s: &MetricsState, enc: &mut DescriptorEncoder) -> fmt::Result {
    family(
        enc,
        "stealscope_cpu_hw_events",
        "Hardware events per CPU (perf_event_open groups: cycles, instructions, cache references and misses; msr PMU: tsc, aperf, mperf, smi), scaled for multiplexing, summed over windows so they never decrease.",
        s.hw.cpus.iter().flat_map(|(cpu, counts)| {
            counts.iter().map(move |(c, v)| {
                (
                    vec![("cpu", cpu.to_string()), ("event", event(*c).to_string())],
                    ConstCounter::new(*v),
                )
            })
        }),
    )?;
    family(
        enc,
        "stealscope_hw_event_unavailable",
        "1 for each hardware counter this machine does not expose, with the reason (e.g. no virtual PMU in the VM).",
        s.hw_missing.iter().map(|m| {
            (
                vec![
                    ("event", event(m.counter).to_string()),
                    ("reason", reason(&m.reason)),
                ],
                ConstGauge::new(1i64),
            )
        }),
    )?;
    Ok(())
}

/// Active findings, noisy neighbours and the build.
fn encode_findings(s: &MetricsState, version: &str, enc: &mut DescriptorEncoder) -> fmt::Result {
    family(
        enc,
        "stealscope_finding",
        "1 while a stealscope doctor finding is active (rules run periodically over the last interval).",
        s.findings.iter().map(|(id, sev)| {
            (
                vec![("id", id.clone()), ("severity", sev.as_str().to_string())],
                ConstGauge::new(1i64),
            )
        }),
    )?;
    family(
        enc,
        "stealscope_noisy_neighbor",
        "Share of other VMs' vCPU wait a noisy neighbour caused, while the rules' host.noisy-neighbor holds for it (it ran over its fair share and harmed these victims).",
        s.noisy.iter().map(|n| {
            (
                vec![
                    ("culprit_kind", n.culprit.kind.to_string()),
                    ("culprit", n.culprit.name.clone()),
                    ("victims", n.victims.clone()),
                    ("severity", n.severity.as_str().to_string()),
                ],
                ConstGauge::new(n.share),
            )
        }),
    )?;
    family(
        enc,
        "stealscope_build_info",
        "The running stealscope version.",
        [(
            vec![("version", version.to_string())],
            ConstGauge::new(1i64),
        )],
    )
}

/// Who stole it: culprit counters, episode histograms, collector health.
fn encode_wait_by(s: &MetricsState, enc: &mut DescriptorEncoder) -> fmt::Result {
    family(
        enc,
        "stealscope_vm_wait_by_seconds",
        "Run-queue wait of each VM's vCPUs by what ran on their CPU meanwhile (scheduler events): its 5 largest culprits so far, the rest as culprit=\"other\".",
        s.wait_by.vms.iter().flat_map(|(vm, v)| {
            v.series().into_iter().map(move |(c, secs_)| {
                (
                    vec![
                        ("vm", vm.clone()),
                        ("culprit_kind", c.kind.to_string()),
                        ("culprit", c.name),
                    ],
                    ConstCounter::new(secs(secs_)),
                )
            })
        }),
    )?;
    let with_episodes = s.wait_by.vms.iter().filter(|(_, v)| v.episodes.count > 0);
    if with_episodes.clone().next().is_some() {
        let mut m = enc.encode_descriptor(
            "stealscope_vcpu_wait_episode_seconds",
            "Length of each run-queue wait episode (queued to running) of each VM's vCPUs (scheduler events).",
            None,
            MetricType::Histogram,
        )?;
        for (vm, v) in with_episodes {
            let labels = [("vm", vm.clone())];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                secs(v.episodes.sum_ns as f64 / 1e9),
                v.episodes.count,
                &episode_buckets(&v.episodes),
                None,
            )?;
        }
    }
    let Some(st) = &s.sched else {
        return Ok(());
    };
    family(
        enc,
        "stealscope_sched_route_info",
        "1, labelled with the scheduler-event route that runs (bpf, tracefs) or none with the reason.",
        [(
            vec![("route", st.route.clone()), ("reason", st.reason.clone())],
            ConstGauge::new(1i64),
        )],
    )?;
    if st.route == "none" {
        return Ok(());
    }
    for (name, help, v) in [
        (
            "stealscope_sched_events",
            "Scheduler events the collector handled.",
            st.events,
        ),
        (
            "stealscope_sched_events_lost",
            "Scheduler events lost (kernel buffer overrun, full map, or a BPF run the kernel skipped): their wait is charged as unknown.",
            st.lost_events,
        ),
        (
            "stealscope_sched_overflows",
            "Waits longer than the BPF route's per-CPU record: their older part is charged as unknown.",
            st.overflows,
        ),
    ] {
        let c = ConstCounter::new(v);
        c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)?;
    }
    let g = ConstGauge::new(st.unwatched as i64);
    g.encode(enc.encode_descriptor(
        "stealscope_sched_unwatched_threads",
        "Threads the collector was asked to watch but could not (its map full): their wait is not attributed.",
        None,
        g.metric_type(),
    )?)?;
    Ok(())
}

/// Label value of a counter: perf's name without the PMU and in snake case.
fn event(c: Counter) -> &'static str {
    match c {
        Counter::Cycles => "cycles",
        Counter::Instructions => "instructions",
        Counter::CacheReferences => "cache_references",
        Counter::CacheMisses => "cache_misses",
        Counter::Tsc => "tsc",
        Counter::Aperf => "aperf",
        Counter::Mperf => "mperf",
        Counter::Smi => "smi",
    }
}

/// Short, stable reason for a label (the report has the long one).
fn reason(r: &Reason) -> String {
    match r {
        Reason::Open { error, .. } => format!("perf_event_open: {error}"),
        Reason::NoPmu { .. } => "no such PMU".into(),
        Reason::NotListed { .. } => "event not listed by the PMU".into(),
        Reason::BadSysfs { .. } => "unreadable PMU description".into(),
    }
}

/// OpenMetrics names a counter family without `_total` and ends with
/// `# EOF`; the classic format names it with the suffix and has no marker.
/// Everything else we emit is the same in both.
fn to_classic(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.rsplit_once(' ').unwrap_or((rest, ""));
            let suffix = if ty == "counter" { "_total" } else { "" };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {name}{suffix} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {ty}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::stat::parse;
    use stealscope_who::{Culprit, Kind};

    /// The sample lines of an exposition (no `#` lines): the same in the
    /// text format and OpenMetrics.
    pub(super) fn samples(t: &str) -> Vec<&str> {
        t.lines().filter(|l| !l.starts_with('#')).collect()
    }

    fn state() -> SharedState {
        let mut s = MetricsState {
            cpu: RunningCpuTimes::new(100.0),
            ..Default::default()
        };
        let st = |steal: u64| {
            parse(
                &format!("cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 10 0 5 80 1 0 0 {steal} 0 0\ncpu1 1 2 3 4 0 0 0 0 0 0\n"),
                "s",
            )
            .unwrap()
        };
        s.cpu.push(1_000_000_000, st(5));
        s.cpu.push(1_100_000_000, st(8));
        s.vcpus.push(VcpuTimes {
            vm: "web \"1\"".into(),
            vcpu: 0,
            wait_s: 1.5,
            run_s: 9.0,
        });
        s.findings.push(("steal.bursty".into(), Severity::Warning));
        s.noisy.push(crate::metrics_noisy::NoisyNeighbor {
            culprit: Culprit::new(Kind::HostProcess, "burn"),
            victims: "web \"1\",db".into(),
            severity: Severity::Warning,
            share: 0.4,
        });
        s.wait_by.add(
            "web \"1\"",
            Culprit::new(Kind::HostProcess, "burn"),
            1_500_000_000,
        );
        s.wait_by
            .vms
            .get_mut("web \"1\"")
            .unwrap()
            .episodes
            .record(3_000_000);
        s.sched = Some(SchedStatus {
            route: "tracefs".into(),
            reason: String::new(),
            events: 10,
            lost_events: 2,
            overflows: 3,
            unwatched: 0,
        });
        let tsc = |t_ns, count| stealscope_readers::perf::CounterSample {
            t_ns,
            cpus: vec![stealscope_readers::perf::CpuRead {
                cpu: 0,
                groups: vec![stealscope_readers::perf::GroupRead {
                    enabled_ns: t_ns,
                    running_ns: t_ns,
                    counts: [(Counter::Tsc, count)].into(),
                }],
            }],
        };
        s.hw.push(tsc(10, 1000));
        s.hw.push(tsc(20, 1250));
        s.hw_missing.push(Missing {
            counter: Counter::Cycles,
            reason: Reason::Open {
                errno: 2,
                error: "No such file or directory".into(),
            },
            cpus: vec![],
            device: None,
        });
        Arc::new(Mutex::new(s))
    }

    fn sample<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn both_formats_carry_the_same_series() {
        let e = Exporter::new(state(), "9.9.9");
        let om = e.encode(Format::OpenMetrics);
        let text = e.encode(Format::Text);
        assert!(om.ends_with("# EOF\n"));
        assert!(!text.contains("# EOF"));
        assert!(om.contains("# TYPE stealscope_cpu_seconds counter\n"));
        assert!(text.contains("# TYPE stealscope_cpu_seconds_total counter\n"));
        assert!(text.contains("# HELP stealscope_cpu_seconds_total Seconds each CPU"));
        assert_eq!(samples(&om), samples(&text));
        // 8 modes per CPU; 0.03 s of steal in 0.1 s = 0.3 lands in the
        // 0.45 bucket and above.
        assert_eq!(
            sample(&text, "stealscope_cpu_seconds_total{cpu=\"0\"").len(),
            8
        );
        assert_eq!(
            sample(&text, "stealscope_cpu_seconds_total{cpu=\"1\"").len(),
            8
        );
        assert!(text.contains("stealscope_cpu_seconds_total{cpu=\"0\",mode=\"steal\"} 0.08\n"));
        assert!(text.contains("stealscope_steal_window_ratio_bucket{le=\"0.25\",cpu=\"0\"} 0\n"));
        assert!(text.contains("stealscope_steal_window_ratio_bucket{le=\"0.45\",cpu=\"0\"} 1\n"));
        assert!(text.contains("stealscope_steal_window_ratio_bucket{le=\"+Inf\",cpu=\"0\"} 1\n"));
        assert!(text.contains("stealscope_steal_window_ratio_bucket{le=\"0.0\",cpu=\"1\"} 1\n"));
        assert!(text
            .contains("stealscope_vcpu_wait_seconds_total{vm=\"web \\\"1\\\"\",vcpu=\"0\"} 1.5\n"));
        assert!(text.contains("stealscope_finding{id=\"steal.bursty\",severity=\"warning\"} 1\n"));
        assert!(text.contains("stealscope_build_info{version=\"9.9.9\"} 1\n"));
        assert!(text.contains("stealscope_vm_wait_by_seconds_total{vm=\"web \\\"1\\\"\",culprit_kind=\"host-process\",culprit=\"burn\"} 1.5\n"));
        assert!(text.contains("culprit_kind=\"other\",culprit=\"other\"} 0.0\n"));
        assert!(text.contains(
            "stealscope_vcpu_wait_episode_seconds_bucket{le=\"0.002\",vm=\"web \\\"1\\\"\"} 0\n"
        ));
        assert!(text.contains(
            "stealscope_vcpu_wait_episode_seconds_bucket{le=\"0.005\",vm=\"web \\\"1\\\"\"} 1\n"
        ));
        assert!(text.contains("stealscope_sched_route_info{route=\"tracefs\",reason=\"\"} 1\n"));
        assert!(
            text.contains("stealscope_noisy_neighbor{culprit_kind=\"host-process\",culprit=\"burn\",victims=\"web \\\"1\\\",db\",severity=\"warning\"} 0.4\n"),
            "{text}"
        );
        assert!(
            text.contains("stealscope_sched_events_lost_total 2\n"),
            "{text}"
        );
        assert!(
            text.contains("stealscope_sched_overflows_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("stealscope_sched_unwatched_threads 0\n"),
            "{text}"
        );
        assert!(text.contains("stealscope_cpu_hw_events_total{cpu=\"0\",event=\"tsc\"} 250.0\n"));
        assert!(text.contains(
            "stealscope_hw_event_unavailable{event=\"cycles\",reason=\"perf_event_open: No such file or directory\"} 1\n"
        ));
        for (name, ty) in FAMILIES {
            assert!(text.contains(&format!("# TYPE {name} {ty}\n")), "{name}");
        }
    }

    #[test]
    fn empty_families_are_left_out() {
        let e = Exporter::new(Arc::default(), "1");
        let text = e.encode(Format::Text);
        assert!(!text.contains("vcpu"));
        assert!(!text.contains("stealscope_finding"));
        assert!(text.contains("stealscope_build_info"));
    }

    #[test]
    fn negotiation() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("text/plain, application/openmetrics-text;q=0.2")),
            Format::Text
        );
    }
}
