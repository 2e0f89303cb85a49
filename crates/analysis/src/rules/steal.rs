//! Steal: how much, whether it hit busy or idle vCPUs, whether it came in
//! bursts that averages hide, and whether the counters can be trusted.

use crate::finding::{evidence, round, Evidence, Finding, Severity};
use stealscope_model::bursts::{Episode, Span};
pub use stealscope_model::bursts::{BURST_MIN_UNITS, BURST_SPAN_S, BURST_WINDOW_PCT};
use stealscope_model::exact_steal::{ExactSteal, StoredExactSteal};
use stealscope_model::windows::{BUSY_WINDOW_PCT, IDLE_WINDOW_PCT};
use stealscope_model::{Anomaly, MachineModel};

/// Mean steal at which we speak up: below ~2 % steal is within the noise of
/// tick accounting on a shared host and costs little throughput.
pub const STEAL_WARN_PCT: f64 = 2.0;
/// One CPU this robbed is worth a finding even if the mean is low (a pinned
/// hot thread suffers the per-CPU figure, not the mean).
pub const STEAL_CPU_WARN_PCT: f64 = 5.0;
/// Critical: the wellness-portal case lost 26 % throughput at only 4 % steal;
/// at 10 % the loss is larger than most services can absorb.
pub const STEAL_CRITICAL_PCT: f64 = 10.0;
/// Bursts are reported only while the interval average stays below this, i.e. the 1 s/15 s views
/// that people alert on would show nothing alarming.
pub const BURST_MEAN_BELOW_PCT: f64 = 5.0;

const STAT: &str = "/proc/stat";

fn per_cpu_steal(m: &MachineModel) -> Evidence {
    Evidence::List(
        m.interval
            .cpus
            .iter()
            .map(|c| evidence!{"cpu" => c.cpu, "steal_pct" => round(c.steal_pct(), 2), "busy_pct" => round(c.busy_pct(), 2)})
            .collect(),
    )
}

pub fn busy_idle(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(mean) = m.steal_pct() else { return };
    let max_cpu = m
        .interval
        .cpus
        .iter()
        .map(|c| c.steal_pct())
        .fold(0.0, f64::max);
    if mean < STEAL_WARN_PCT && max_cpu < STEAL_CPU_WARN_PCT {
        return;
    }
    let s = m.split;
    if s.total_s <= 0.0 {
        return;
    }
    let sev = if mean >= STEAL_CRITICAL_PCT || max_cpu >= 2.0 * STEAL_CRITICAL_PCT {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let basis = if m.windows.is_empty() {
        "whole interval (no sample series)".to_string()
    } else {
        format!(
            "{} windows of ~{:.0} ms",
            m.windows.len(),
            1000.0 * m.wall_s / m.windows.len().max(1) as f64
        )
    };
    let busy = s.busy_s >= s.idle_s;
    let f = if busy {
        Finding::new(
            "steal.busy",
            sev,
            format!("{mean:.1}% of CPU time stolen while the vCPUs wanted to run (host oversubscribed)"),
        )
        .remedy(
            "The host has more runnable vCPUs than physical CPUs at these moments; nothing inside this guest fixes it. \
             Ask the provider to move the VM to a less loaded host or to a dedicated/pinned instance type, or resize so \
             the work needs fewer vCPU-seconds. Measure again with `stealscope doctor --interval 60` to confirm.",
        )
        .case("who-stole-my-cpu-talk.md")
    } else {
        Finding::new(
            "steal.idle",
            sev,
            format!("{mean:.1}% of CPU time stolen while the guest was mostly idle (host scheduling or configuration)"),
        )
        .remedy(
            "Steal that hits idle vCPUs comes from host-side scheduling or configuration, not competition for work: \
             the host can mitigate it (shared VMs in one cpu group rather than per-VM groups, whose weights alone \
             measured unfair; vCPU pinning; NUMA placement; halt-polling). Send this report to the provider; on \
             your own KVM host run `stealscope host`. Inside the guest, check the idle.* findings: a guest that \
             polls while idle accrues steal.",
        )
        .case("who-stole-my-cpu-talk.md")
    };
    out.push(
        f.evidence("steal_pct", round(mean, 2))
            .evidence("max_cpu_steal_pct", round(max_cpu, 2))
            .evidence("steal_busy_share", round(s.busy_share().unwrap_or(0.0), 3))
            .evidence("steal_idle_share", round(s.idle_share().unwrap_or(0.0), 3))
            .evidence(
                "steal_mixed_share",
                round(
                    1.0 - s.busy_share().unwrap_or(0.0) - s.idle_share().unwrap_or(0.0),
                    3,
                ),
            )
            .evidence("busy_window_pct", BUSY_WINDOW_PCT)
            .evidence("idle_window_pct", IDLE_WINDOW_PCT)
            .evidence("basis", basis)
            .evidence("per_cpu", per_cpu_steal(m))
            .files(&[STAT, "samples.jsonl"])
            .reference("Documentation/virt/kvm/x86/msr.rst (MSR_KVM_STEAL_TIME)"),
    );
}

/// Steal in bursts that averages hide: judged on the exact episodes when
/// the guest steal collector measured the interval (nanoseconds, each with
/// its victim), else on the /proc/stat sample windows (10 ms units, so
/// spans of at least [`BURST_SPAN_S`] and two units).
pub fn bursty(m: &MachineModel, out: &mut Vec<Finding>) {
    let Some(mean) = m.steal_pct() else { return };
    if mean >= BURST_MEAN_BELOW_PCT {
        return;
    }
    let exact = measured_exact(m);
    let judged = match exact {
        Some(e) => stealscope_model::bursts::judge_episodes(&episodes(e)),
        None => stealscope_model::bursts::judge(&m.windows, m.clk_tck as f64),
    };
    let Some(b) = judged else { return };
    let p = b.peak;
    let f = Finding::new(
        "steal.bursty",
        Severity::Warning,
        format!(
            "Steal arrives in bursts: {:.0} ms stolen in {:.0} ms ({:.0}%) on CPU {} while the average is {mean:.1}%",
            p.steal_s * 1000.0,
            p.wall_s * 1000.0,
            p.steal_pct(),
            p.cpu
        ),
    )
    .evidence("peak_steal_pct", round(p.steal_pct(), 1))
    .evidence("peak_steal_ms", round(p.steal_s * 1000.0, 1))
    .evidence("peak_cpu", p.cpu)
    .evidence("peak_start_s", round(p.start_s, 2))
    .evidence("peak_span_ms", round(p.wall_s * 1000.0, 1))
    .evidence("bursts", b.count)
    .evidence("mean_steal_pct", round(mean, 2))
    .evidence("burst_threshold_pct", BURST_WINDOW_PCT)
    .evidence("min_span_ms", round(BURST_SPAN_S * 1000.0, 1));
    let f = match exact {
        Some(e) => exact_burst_evidence(f, e, &p),
        None => f
            .evidence("source", "windows")
            .evidence("windows", m.windows.len())
            .evidence(
                "min_steal_ms",
                round(1000.0 * BURST_MIN_UNITS / m.clk_tck as f64, 1),
            )
            .files(&["samples.jsonl"]),
    };
    out.push(bursty_remedy(f));
}

fn measured_exact(m: &MachineModel) -> Option<&ExactSteal> {
    match m.t1.exact_steal.as_ref()? {
        StoredExactSteal::Measured(e) => Some(e),
        StoredExactSteal::Unavailable { .. } => None,
    }
}

fn episodes(e: &ExactSteal) -> Vec<Episode> {
    e.largest
        .iter()
        .map(|x| Episode {
            cpu: x.cpu,
            seen_ns: x.monotonic_ns,
            ns: x.ns,
        })
        .collect()
}

/// The exact judgement's evidence: the peak's episodes by victim (`idle`
/// for idle steal), most first, and how many episodes were not listed.
fn exact_burst_evidence(f: Finding, e: &ExactSteal, p: &Span) -> Finding {
    let (from, to) = (p.start_s, p.start_s + p.wall_s);
    let mut hit: Vec<(String, u64)> = Vec::new();
    for x in e.largest.iter().filter(|x| x.cpu == p.cpu) {
        let end = x.monotonic_ns as f64 / 1e9;
        if end - x.ns as f64 / 1e9 < from - 1e-9 || end > to + 1e-9 {
            continue;
        }
        let who = x.victim.as_ref().map_or("idle".to_string(), |t| {
            format!("{} (pid {})", t.comm, t.pid)
        });
        match hit.iter_mut().find(|h| h.0 == who) {
            Some(h) => h.1 += x.ns,
            None => hit.push((who, x.ns)),
        }
    }
    hit.sort_by_key(|h| std::cmp::Reverse(h.1));
    let victims = Evidence::List(
        hit.iter()
            .map(|(who, ns)| evidence! {"hit" => who.as_str(), "ms" => round(*ns as f64 / 1e6, 2)})
            .collect(),
    );
    f.evidence("source", "exact")
        .evidence("peak_hit", victims)
        .evidence("episodes_listed", e.largest.len())
        .evidence("episodes_unlisted", e.unlisted)
        .files(&[stealscope_model::exact_steal::EXACT_STEAL_FILE])
}

fn bursty_remedy(f: Finding) -> Finding {
    f.remedy(
            "1 s and 15 s averages hide these stalls. Measure them with a higher sample rate (`stealscope doctor \
             --rate 100`) and the active probes (`stealscope probe preempt`, `stealscope probe wakeup`), and alert \
             on short-window steal rather than on averages. Latency-sensitive services need a host with \
             dedicated or pinned vCPUs; ask the provider with this evidence.",
    )
    .case("guest-micro-jitter-case.txt")
}

fn describe(a: &Anomaly) -> Evidence {
    Evidence::of(a)
}

pub fn counter_anomaly(m: &MachineModel, out: &mut Vec<Finding>) {
    let mut all: Vec<&Anomaly> = m
        .interval
        .anomalies
        .iter()
        .filter(|a| a.is_counter())
        .collect();
    for (_, w) in &m.windows {
        all.extend(w.anomalies.iter().filter(|a| a.is_counter()));
    }
    if all.is_empty() {
        return;
    }
    let steal_backwards = all
        .iter()
        .any(|a| matches!(a, Anomaly::Backwards { column, .. } if column == "steal"));
    let mut cpus: Vec<u32> = all.iter().map(|a| a.cpu()).collect();
    cpus.sort_unstable();
    cpus.dedup();
    out.push(
        Finding::new(
            "steal.counter-anomaly",
            Severity::Warning,
            format!(
                "{} CPU time counter anomal{} on CPU {} (clamped; figures for those windows are lower bounds)",
                all.len(),
                if all.len() == 1 { "y" } else { "ies" },
                cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
        )
        .evidence("count", all.len())
        .evidence("steal_went_backwards", steal_backwards)
        .evidence("anomalies", all.iter().take(10).map(|a| describe(a)).collect::<Vec<_>>())
        .files(&[STAT])
        .remedy(if crate::roles::Roles::of(m).host_only() {
            "A counter in /proc/stat went backwards or advanced faster than wall time: a kernel accounting bug \
             (idle and iowait under NO_HZ are known offenders; node_exporter#742, psutil#1210). stealscope clamps \
             such deltas, so the host's idle time and its busy/idle steal split are lower bounds for those windows. \
             If it repeats, report the kernel version."
        } else {
            "A counter in /proc/stat went backwards or advanced faster than wall time. Known causes: host-side steal \
             clock regressing after live migration or vCPU hotplug, and guest kernel bugs (node_exporter#742, \
             psutil#1210). stealscope clamps such deltas; other tools may show negative or >100% steal. If it \
             repeats, report the guest kernel version and hypervisor to the provider."
        })
        .reference("kernel/sched/cputime.c steal_account_process_time"),
    );
}

/// A window with at least this much steal counts as high-steal for the IPC
/// comparison (the case compared "high steal" periods with quiet ones).
pub const IPC_HIGH_STEAL_PCT: f64 = 10.0;
/// ...and one with at most this much as low-steal (tick noise level).
pub const IPC_LOW_STEAL_PCT: f64 = 2.0;
/// IPC of a window in which the CPU mostly idled measures the idle loop, not
/// the workload: only windows at least this busy are compared.
pub const IPC_MIN_UTIL_PCT: f64 = 25.0;
/// Fewer windows than this on either side is not a comparison.
pub const IPC_MIN_WINDOWS: usize = 5;
/// High-steal IPC at or below this share of low-steal IPC: the case fell to
/// 0.58 (1.12 -> 0.65); run-to-run IPC of one workload varies ~10 %.
pub const IPC_COLLAPSE_RATIO: f64 = 0.75;
/// At or below half the work per cycle is lost to refilling caches and TLBs.
pub const IPC_CRITICAL_RATIO: f64 = 0.5;

pub fn ipc_collapse(m: &MachineModel, out: &mut Vec<Finding>) {
    use stealscope_model::hw::HwTotals;
    let pairs = m.hardware.with_steal(&m.windows);
    let (mut low, mut high) = (HwTotals::default(), HwTotals::default());
    let mut cpus: Vec<u32> = Vec::new();
    let mut min_share: Option<f64> = None;
    for p in pairs.iter().filter(|p| p.util_pct >= IPC_MIN_UTIL_PCT) {
        if p.hw.ipc().is_none() {
            continue;
        }
        let side = if p.steal_pct >= IPC_HIGH_STEAL_PCT {
            &mut high
        } else if p.steal_pct <= IPC_LOW_STEAL_PCT {
            &mut low
        } else {
            continue;
        };
        side.add(&p.hw);
        cpus.push(p.hw.cpu);
        if let Some(s) = p.hw.hw_running_share {
            min_share = Some(min_share.map_or(s, |m: f64| m.min(s)));
        }
    }
    if low.windows < IPC_MIN_WINDOWS || high.windows < IPC_MIN_WINDOWS {
        return;
    }
    let (Some(ipc_low), Some(ipc_high)) = (low.ipc(), high.ipc()) else {
        return;
    };
    let ratio = ipc_high / ipc_low;
    if !ratio.is_finite() || ratio > IPC_COLLAPSE_RATIO {
        return;
    }
    cpus.sort_unstable();
    cpus.dedup();
    let sev = if ratio <= IPC_CRITICAL_RATIO {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let opt = |v: Option<f64>, d| v.map_or(Evidence::Null, |x| round(x, d));
    out.push(
        Finding::new(
            "steal.ipc-collapse",
            sev,
            format!(
                "Instructions per cycle fall from {ipc_low:.2} to {ipc_high:.2} ({:.0}% lower) in high-steal windows: \
                 the neighbour evicts this VM's caches",
                100.0 * (1.0 - ratio)
            ),
        )
        .evidence("ipc_low_steal", round(ipc_low, 3))
        .evidence("ipc_high_steal", round(ipc_high, 3))
        .evidence("ipc_ratio", round(ratio, 3))
        .evidence("cache_miss_rate_low_steal", opt(low.miss_rate(), 4))
        .evidence("cache_miss_rate_high_steal", opt(high.miss_rate(), 4))
        .evidence("cache_mpki_low_steal", opt(low.mpki(), 2))
        .evidence("cache_mpki_high_steal", opt(high.mpki(), 2))
        .evidence("windows_low_steal", low.windows)
        .evidence("windows_high_steal", high.windows)
        .evidence("cpus_compared", Evidence::of(&cpus))
        .evidence("min_counter_running_share", opt(min_share, 3))
        .evidence("high_steal_window_pct", IPC_HIGH_STEAL_PCT)
        .evidence("low_steal_window_pct", IPC_LOW_STEAL_PCT)
        .evidence("min_util_pct", IPC_MIN_UTIL_PCT)
        .evidence("collapse_ratio", IPC_COLLAPSE_RATIO)
        .files(&["counters.json", "samples.jsonl", STAT])
        .remedy(
            "Steal costs more than the stolen time: when the host runs another tenant on this vCPU's core, that \
             tenant evicts the L1/L2/L3 and TLB state this VM built, and the vCPU pays for it in cache misses after \
             it gets the core back. Only isolation fixes it: a dedicated-core or pinned instance type, or on your own \
             host pinning each vCPU to its own core (cpuset / libvirt <vcpupin>) with no other tenant on that core's \
             SMT sibling or L3 domain. Inside the guest, keeping hot threads on fixed CPUs (static PHP-FPM pools, \
             nohz_full for the busy CPUs) limits the damage, as in the case. Compare `perf stat -e \
             cycles,instructions,cache-misses -a -I 100` next to `stealscope doctor` to confirm.",
        )
        .reference("perf_event_open(2): PERF_FORMAT_GROUP, time_enabled/time_running scaling")
        .case("guest-micro-jitter-case.txt"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ticks, TestMachine};

    #[test]
    fn busy_steal_fires_critical_at_20_pct() {
        // Both CPUs wanted to run all the time and lost a fifth of it.
        let m = TestMachine::guest().cpus(&[ticks(400, 0, 100); 2]);
        let f = m.run(busy_idle);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "steal.busy");
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(f[0].evidence["steal_pct"].as_f64(), Some(20.0));
    }

    #[test]
    fn idle_steal_fires_as_a_warning() {
        // 3 % steal on mostly idle CPUs: above the 2 % mean threshold.
        let m = TestMachine::guest().cpus(&[ticks(20, 465, 15); 2]);
        let f = m.run(busy_idle);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "steal.idle");
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn steal_below_both_thresholds_is_silent() {
        // 1 % mean, 1.6 % on the worst CPU: under 2 % and 5 %.
        let m = TestMachine::guest().cpus(&[ticks(200, 295, 5), ticks(200, 292, 8)]);
        assert!(m.run(busy_idle).is_empty());
        assert!(TestMachine::guest().run(busy_idle).is_empty());
    }

    fn windows(burst: u64) -> Vec<Vec<crate::testing::Ticks>> {
        // 50 windows of 100 ms on 2 CPUs; window 20 of CPU 1 loses `burst` ticks.
        (0..50)
            .map(|i| {
                let b = if i == 20 { burst } else { 0 };
                vec![ticks(3, 7, 0), ticks(3, 7 - b, b)]
            })
            .collect()
    }

    #[test]
    fn one_burst_under_a_low_mean_fires() {
        let f = TestMachine::guest().windows(windows(2)).run(bursty);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "steal.bursty");
        assert_eq!(f[0].evidence["peak_cpu"].as_f64(), Some(1.0));
        assert_eq!(f[0].evidence["bursts"].as_f64(), Some(1.0));
    }

    /// The collector's stored reading: one `ms`-long busy episode on CPU 1
    /// that hit postgres (pid 812), seen 2 s into the capture.
    fn exact(ms: f64) -> String {
        let ns = (ms * 1e6) as u64;
        let cpu = |c: u32, ns: u64, n: u64| {
            format!(
                r#"{{"cpu":{c},"busy_ns":{ns},"idle_ns":0,"episodes":{n},"over_1ms":{n},"over_10ms":{n},"max_ns":{ns}}}"#
            )
        };
        let pg =
            format!(r#"{{"pid":812,"tid":812,"comm":"postgres","busy_ns":{ns},"episodes":1}}"#);
        format!(
            r#"{{"status":"measured","span_s":5.0,"threshold_ns":100000,"unlisted":0,"cpus":[{},{}],"tasks":[{pg}],"largest":[{{"monotonic_ns":2000000000,"cpu":1,"ns":{ns},"victim":{pg}}}]}}"#,
            cpu(0, 0, 0),
            cpu(1, ns, 1)
        )
    }

    #[test]
    fn exact_episodes_judge_bursts_when_the_collector_ran() {
        let file = stealscope_model::exact_steal::EXACT_STEAL_FILE;
        // An 18 ms episode: a burst the windows (one 10 ms unit) miss.
        let f = TestMachine::guest()
            .windows(windows(1))
            .file(file, exact(18.0))
            .run(bursty);
        assert_eq!(f.len(), 1, "{f:?}");
        let e = &f[0].evidence;
        assert_eq!(e["source"].as_str(), Some("exact"));
        assert_eq!(e["peak_cpu"].as_f64(), Some(1.0));
        assert_eq!(e["peak_steal_ms"].as_f64(), Some(18.0));
        let Evidence::List(hit) = &e["peak_hit"] else {
            panic!("{e:?}");
        };
        let Evidence::Map(first) = &hit[0] else {
            panic!("{hit:?}");
        };
        assert_eq!(first["hit"].as_str(), Some("postgres (pid 812)"));
        // Two units in a window that the exact clock says held 5 ms: the
        // windows' burst was the counter's rounding, and nothing fires.
        let f = TestMachine::guest()
            .windows(windows(2))
            .file(file, exact(5.0))
            .run(bursty);
        assert!(f.is_empty(), "{f:?}");
        // Without the collector, the windows judge.
        let f = TestMachine::guest().windows(windows(2)).run(bursty);
        assert_eq!(f[0].evidence["source"].as_str(), Some("windows"));
    }

    #[test]
    fn one_tick_is_not_a_burst() {
        // 10 % of a window: one tick can be rounding alone.
        assert!(TestMachine::guest()
            .windows(windows(1))
            .run(bursty)
            .is_empty());
        // No sample series, no burst detection.
        assert!(TestMachine::guest()
            .cpus(&[ticks(100, 390, 10); 2])
            .run(bursty)
            .is_empty());
    }

    #[test]
    fn steal_going_backwards_is_a_counter_anomaly() {
        let stat = |steal: u64| {
            format!(
                "cpu  200 0 0 800 0 0 0 {s2} 0 0\ncpu0 100 0 0 400 0 0 0 {steal} 0 0\ncpu1 100 0 0 400 0 0 0 100 0 0\n",
                s2 = steal + 100
            )
        };
        let t1 = stat(50).replace("cpu0 100 0 0 400", "cpu0 300 0 0 700");
        let t1 = t1.replace("cpu1 100 0 0 400", "cpu1 300 0 0 700");
        let m = TestMachine::guest().files("/proc/stat", &stat(100), &t1);
        let f = m.run(counter_anomaly);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "steal.counter-anomaly");
        // Counters that only move forward raise nothing.
        assert!(TestMachine::guest().run(counter_anomaly).is_empty());
    }
}
