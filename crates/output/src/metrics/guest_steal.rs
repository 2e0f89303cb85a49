//! Exact guest steal (issue 30), from the guest steal collector that
//! `serve` keeps loaded: busy and idle steal per CPU, an episode histogram
//! per CPU, busy steal by victim process (the [`TOP_VICTIMS`] largest,
//! then `other`), and which route gives the steal with the reason when it
//! is /proc/stat's. Seconds are the collector's ns / 1e9, unrounded (the
//! shortest decimal that reads back as that float). Bounded: per CPU 2 counters and one histogram of 14
//! buckets, then at most 11 process series and one route series.

use super::{family, Labels};
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt;
use stealscope_model::host::running_wait_by::buckets_at;
use stealscope_model::running_exact_steal::{
    RunningExactSteal, StealRoute, EPISODE_BOUNDS_S, TOP_VICTIMS,
};

/// The exact-steal families as they appear on the wire (beside
/// `FAMILIES`): present on the live root only, the counters only while
/// the route is `bpf`.
pub const GUEST_STEAL_FAMILIES: [(&str, &str); 4] = [
    ("stealscope_guest_steal_route_info", "gauge"),
    ("stealscope_guest_steal_seconds_total", "counter"),
    ("stealscope_guest_steal_episode_seconds", "histogram"),
    ("stealscope_guest_steal_process_seconds_total", "counter"),
];

/// The `process` label of everything outside the top.
pub const OTHER: &str = "other";

pub(super) fn encode_guest_steal(
    e: &RunningExactSteal,
    enc: &mut DescriptorEncoder,
) -> fmt::Result {
    family(
        enc,
        "stealscope_guest_steal_route_info",
        "1, labelled with where guest steal comes from: bpf (the exact collector) or proc_stat (10 ms units), with the reason the collector does not run.",
        (e.route != StealRoute::Starting).then(|| {
            (
                vec![
                    ("route", e.route.label().to_string()),
                    ("reason", e.route.reason().to_string()),
                ] as Labels,
                ConstGauge::new(1i64),
            )
        }),
    )?;
    family(
        enc,
        "stealscope_guest_steal_seconds",
        "Exact steal per CPU (the paravirtual steal clock, in ns, read by BPF at each switch and tick) since serve started: kind=busy while a task ran, idle while the CPU idled (the host was slow to run the woken vCPU).",
        e.cpus().flat_map(|c| {
            [("busy", c.busy_ns), ("idle", c.idle_ns)].map(|(kind, ns)| {
                (
                    vec![("cpu", c.cpu.to_string()), ("kind", kind.to_string())],
                    ConstCounter::new(ns as f64 / 1e9),
                )
            })
        }),
    )?;
    if e.cpus().next().is_some() {
        let mut m = enc.encode_descriptor(
            "stealscope_guest_steal_episode_seconds",
            "Length of each steal episode (one advance of a CPU's steal clock, busy or idle), per CPU; its sum is the CPU's busy + idle steal.",
            None,
            MetricType::Histogram,
        )?;
        for c in e.cpus() {
            let labels = [("cpu", c.cpu.to_string())];
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                c.episodes.sum_ns as f64 / 1e9,
                c.episodes.count,
                &buckets_at(&c.episodes, &EPISODE_BOUNDS_S),
                None,
            )?;
        }
    }
    family(
        enc,
        "stealscope_guest_steal_process_seconds",
        "Busy steal by the process that lost it (its name, no pid): the 10 largest so far, the rest as process=\"other\".",
        e.victims().into_iter().map(|(name, s)| {
            (
                vec![("process", name.unwrap_or(OTHER).to_string())] as Labels,
                ConstCounter::new(s),
            )
        }),
    )
}

const _: () = assert!(TOP_VICTIMS == 10, "the help text says 10");

#[cfg(test)]
mod tests {
    use super::super::tests::samples;
    use super::super::{Exporter, Format, MetricsState};
    use stealscope_model::running_exact_steal::{ExactReading, RunningExactSteal};
    use stealscope_who::{CpuSteal, GuestStealSample, StealTaskId, TaskSteal};

    fn cpu(n: u32, busy: u64, idle: u64, episodes: &[u64]) -> CpuSteal {
        CpuSteal {
            hook_runs: 3,
            steal_clock_ns: 1,
            ..CpuSteal::from_episodes(n, busy, idle, episodes)
        }
    }

    fn task(tid: u32, comm: &str, busy_ns: u64) -> TaskSteal {
        TaskSteal {
            task: StealTaskId {
                tid,
                tgid: tid,
                start_ns: 1,
                comm: comm.into(),
            },
            busy_ns,
            episodes: 1,
        }
    }

    fn text(e: RunningExactSteal) -> String {
        let state = MetricsState {
            exact: e,
            ..Default::default()
        };
        let x = Exporter::new(std::sync::Arc::new(std::sync::Mutex::new(state)), "1");
        let om = x.encode(Format::OpenMetrics);
        let text = x.encode(Format::Text);
        assert_eq!(samples(&om), samples(&text));
        text
    }

    #[test]
    fn exact_steal_per_cpu_with_episodes_and_victims() {
        let mut e = RunningExactSteal::default();
        assert!(
            !text(e.clone()).contains("guest_steal"),
            "loading: nothing yet"
        );
        e.apply(ExactReading::Running);
        // Two episodes on CPU 0 (3 ms busy, 150 us idle) sum to its steal.
        let mut tasks: Vec<TaskSteal> = (0..12)
            .map(|i| task(100 + i, &format!("p{i:02}"), 1_000 * u64::from(i + 1)))
            .collect();
        tasks.push(task(7, "postgres", 3_000_000));
        e.apply(ExactReading::Full {
            sample: GuestStealSample {
                monotonic_ns: 5,
                threshold_ns: 100_000,
                cpus: vec![
                    cpu(0, 3_000_000, 150_000, &[3_000_000, 150_000]),
                    cpu(1, 0, 758_514_771, &[758_514_771]),
                ],
                tasks,
                episodes: vec![],
                episodes_seen: 0,
            },
            processes: Default::default(),
        });
        let t = text(e.clone());
        for want in [
            "# TYPE stealscope_guest_steal_seconds_total counter\n",
            "stealscope_guest_steal_route_info{route=\"bpf\",reason=\"\"} 1\n",
            "stealscope_guest_steal_seconds_total{cpu=\"0\",kind=\"busy\"} 0.003\n",
            "stealscope_guest_steal_seconds_total{cpu=\"0\",kind=\"idle\"} 0.00015\n",
            "stealscope_guest_steal_seconds_total{cpu=\"1\",kind=\"idle\"} 0.758514771\n",
            "stealscope_guest_steal_episode_seconds_bucket{le=\"0.0001\",cpu=\"0\"} 0\n",
            "stealscope_guest_steal_episode_seconds_bucket{le=\"0.0002\",cpu=\"0\"} 1\n",
            "stealscope_guest_steal_episode_seconds_bucket{le=\"0.002\",cpu=\"0\"} 1\n",
            "stealscope_guest_steal_episode_seconds_bucket{le=\"0.005\",cpu=\"0\"} 2\n",
            "stealscope_guest_steal_episode_seconds_bucket{le=\"+Inf\",cpu=\"0\"} 2\n",
            "stealscope_guest_steal_episode_seconds_sum{cpu=\"0\"} 0.00315\n",
            "stealscope_guest_steal_episode_seconds_count{cpu=\"0\"} 2\n",
            "stealscope_guest_steal_episode_seconds_bucket{le=\"1.0\",cpu=\"1\"} 1\n",
            "stealscope_guest_steal_process_seconds_total{process=\"postgres\"} 0.003\n",
            "stealscope_guest_steal_process_seconds_total{process=\"p11\"} 0.000012\n",
        ] {
            assert!(t.contains(want), "{want} missing in\n{t}");
        }
        // 13 processes: the 10 largest, then the three smallest as other.
        let procs: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with("stealscope_guest_steal_process_seconds_total{"))
            .collect();
        assert_eq!(procs.len(), 11, "{procs:?}");
        assert!(
            t.contains(
                "stealscope_guest_steal_process_seconds_total{process=\"other\"} 0.000006\n"
            ),
            "{t}"
        );
        for (name, ty) in super::GUEST_STEAL_FAMILIES {
            assert!(t.contains(&format!("# TYPE {name} {ty}\n")), "{name}");
        }
    }

    #[test]
    fn the_fallback_names_its_reason_and_exports_no_counters() {
        let mut e = RunningExactSteal::default();
        e.apply(ExactReading::Unavailable(
            "/sys/kernel/btf/vmlinux missing (kernel built without BTF)".into(),
        ));
        let t = text(e);
        assert!(t.contains("stealscope_guest_steal_route_info{route=\"proc_stat\",reason=\"/sys/kernel/btf/vmlinux missing (kernel built without BTF)\"} 1\n"), "{t}");
        assert!(!t.contains("stealscope_guest_steal_seconds"), "{t}");
        assert!(!t.contains("stealscope_guest_steal_episode"), "{t}");
        assert!(!t.contains("stealscope_guest_steal_process"), "{t}");
    }
}
