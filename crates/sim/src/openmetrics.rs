//! A simulated fleet written as `stealscope serve` would have exported it,
//! scraped every step: OpenMetrics text with timestamps, for `promtool tsdb
//! create-blocks-from openmetrics` to backfill into a Prometheus TSDB, so
//! that `stealscope fleet` is checked against a real Prometheus.
//!
//! The fleet ([`synthetic`]): hosts of 32 CPUs in 2 nodes, each filled
//! with VMs of 1-8 vCPUs to 1.5 vCPUs per CPU, whose demand follows a daily
//! wave around a per-host level (some hosts run hot: busy steal), and a
//! few hosts whose VMs are all pinned to 8 CPUs while the rest idle (idle
//! steal, which `place` fixes on the host). Each step of each host is one
//! run of [`crate::measured::run_measured`] at that step's levels.
//!
//! Who stole it (`stealscope_vm_wait_by_seconds_total`) is modelled, not
//! simulated: on a host whose CPUs are all busy, a vCPU waits while the
//! others run, so each VM's wait is charged to the other VMs in proportion
//! to their run time in that step (top 5 kept, the rest as `other`).

use crate::measured::{run_measured, HostRun, MeasuredVm};
use std::fmt::Write as _;
use std::io::{self, Write};
use stealscope_placement::synthetic::Rng;

pub const JOB: &str = "stealscope";

#[derive(Debug, Clone)]
pub struct SynthHost {
    /// Its hostname; its Prometheus instance is `NAME:9464`.
    pub name: String,
    pub cpus: u32,
    pub nodes: u32,
    pub mem_gib_per_node: f64,
    pub vms: Vec<SynthVm>,
}

#[derive(Debug, Clone)]
pub struct SynthVm {
    pub vm: MeasuredVm,
    pub uuid: String,
}

impl SynthHost {
    pub fn instance(&self) -> String {
        format!("{}:9464", self.name)
    }
    pub fn measured(&self) -> Vec<MeasuredVm> {
        self.vms.iter().map(|v| v.vm.clone()).collect()
    }
}

/// `hosts` hosts over `steps` steps of `step_s`, from `seed`.
pub fn synthetic(hosts: u32, steps: usize, step_s: f64, seed: u64) -> Vec<SynthHost> {
    (0..hosts)
        .map(|i| synth_host(i, steps, step_s, seed))
        .collect()
}

fn synth_host(i: u32, steps: usize, step_s: f64, seed: u64) -> SynthHost {
    let mut rng = Rng(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let cpus = 32u32;
    // Most hosts moderate, some hot; one in 20 with its VMs pinned.
    let heat = 0.35 + 0.6 * rng.unit() * rng.unit().sqrt();
    let pinned = rng.unit() < 0.05;
    let mut vms = Vec::new();
    let mut vcpus_used = 0;
    while vcpus_used < cpus * 3 / 2 {
        let vcpus = [1u32, 1, 2, 2, 2, 4, 4, 8][(rng.unit() * 8.0) as usize % 8];
        if vcpus_used + vcpus > cpus * 3 / 2 {
            break;
        }
        vcpus_used += vcpus;
        let own = 0.6 + 0.8 * rng.unit();
        let phase = rng.unit() * std::f64::consts::TAU;
        let levels: Vec<f64> = (0..steps)
            .map(|k| {
                let day = (k as f64 * step_s / 86_400.0) * std::f64::consts::TAU;
                let wave = 1.0 + 0.35 * (day + phase).sin();
                (heat * own * wave + 0.1 * (rng.unit() - 0.5)).clamp(0.02, 1.0)
            })
            .collect();
        let n = vms.len();
        vms.push(SynthVm {
            vm: MeasuredVm {
                name: format!("h{i}-vm{n}"),
                vcpus,
                mem_gib: 4.0 * vcpus as f64,
                levels: levels.into(),
                pinned: pinned.then(|| (0..8).collect()),
            },
            uuid: uuid(&mut rng),
        });
    }
    SynthHost {
        name: format!("hv{i:05}"),
        cpus,
        nodes: 2,
        mem_gib_per_node: 128.0,
        vms,
    }
}

fn uuid(rng: &mut Rng) -> String {
    let a = (rng.unit() * u64::MAX as f64) as u64;
    let b = (rng.unit() * u64::MAX as f64) as u64;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// Each step of a host as its own run at that step's levels.
pub fn step_runs(h: &SynthHost, step_s: f64, seed: u64) -> Vec<HostRun> {
    let steps = h.vms.iter().map(|v| v.vm.levels.len()).max().unwrap_or(0);
    (0..steps)
        .map(|k| {
            let vms: Vec<MeasuredVm> = h
                .vms
                .iter()
                .map(|v| MeasuredVm {
                    levels: vec![v.vm.levels.get(k).copied().unwrap_or(0.0)].into(),
                    ..v.vm.clone()
                })
                .collect();
            run_measured(h.cpus, &vms, step_s, step_s, seed ^ k as u64)
        })
        .collect()
}

/// Writes every host's series, scraped at `start_unix + k * step_s` for
/// k = 0..=steps (the counters start at 0). `runs[h]` are `step_runs` of
/// host h. `silent` hosts export only `up 0` (a target with no serve).
pub fn write(
    out: &mut dyn Write,
    hosts: &[SynthHost],
    runs: &[Vec<HostRun>],
    step_s: f64,
    start_unix: f64,
    silent: &[usize],
) -> io::Result<()> {
    let live: Vec<usize> = (0..hosts.len()).filter(|i| !silent.contains(i)).collect();
    let steps = runs.iter().map(Vec::len).max().unwrap_or(0);
    let ts = |k: usize| start_unix + k as f64 * step_s;
    let mut buf = String::new();
    // Families one after another (OpenMetrics groups a family's samples).
    buf.push_str("# TYPE up gauge\n");
    for (i, h) in hosts.iter().enumerate() {
        let v = if silent.contains(&i) { 0 } else { 1 };
        for k in 0..=steps {
            let _ = writeln!(buf, "up{{{}}} {v} {:.3}", host_labels(h), ts(k));
        }
    }
    out.write_all(buf.as_bytes())?;
    for fam in Family::ALL {
        buf.clear();
        let _ = writeln!(buf, "# TYPE {} {}", fam.name(), fam.kind());
        out.write_all(buf.as_bytes())?;
        for &i in &live {
            buf.clear();
            fam.write(&mut buf, &hosts[i], &runs[i], steps, &ts);
            out.write_all(buf.as_bytes())?;
        }
    }
    out.write_all(b"# EOF\n")
}

fn host_labels(h: &SynthHost) -> String {
    format!("instance=\"{}\",job=\"{JOB}\"", h.instance())
}

#[derive(Clone, Copy)]
enum Family {
    HostInfo,
    HostCpus,
    NodeCpus,
    NodeFree,
    VmInfo,
    VmVcpus,
    VmMemory,
    Run,
    Wait,
    Idle,
    WaitBy,
}

impl Family {
    const ALL: [Family; 11] = [
        Family::HostInfo,
        Family::HostCpus,
        Family::NodeCpus,
        Family::NodeFree,
        Family::VmInfo,
        Family::VmVcpus,
        Family::VmMemory,
        Family::Run,
        Family::Wait,
        Family::Idle,
        Family::WaitBy,
    ];

    fn name(self) -> &'static str {
        match self {
            Family::HostInfo => "stealscope_host_info",
            Family::HostCpus => "stealscope_host_cpus",
            Family::NodeCpus => "stealscope_numa_node_cpus",
            Family::NodeFree => "stealscope_numa_node_memory_free_bytes",
            Family::VmInfo => "stealscope_vm_info",
            Family::VmVcpus => "stealscope_vm_vcpus",
            Family::VmMemory => "stealscope_vm_memory_bytes",
            Family::Run => "stealscope_vcpu_run_seconds",
            Family::Wait => "stealscope_vcpu_wait_seconds",
            Family::Idle => "stealscope_cpu_seconds",
            Family::WaitBy => "stealscope_vm_wait_by_seconds",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Family::Run | Family::Wait | Family::Idle | Family::WaitBy => "counter",
            _ => "gauge",
        }
    }

    /// Sample name on the wire: counters with `_total`.
    fn sample(self) -> String {
        match self.kind() {
            "counter" => format!("{}_total", self.name()),
            _ => self.name().to_string(),
        }
    }

    fn write(
        self,
        buf: &mut String,
        h: &SynthHost,
        runs: &[HostRun],
        steps: usize,
        ts: &dyn Fn(usize) -> f64,
    ) {
        let hl = host_labels(h);
        let name = self.sample();
        let mut gauge = |labels: String, v: f64| {
            for k in 0..=steps {
                let _ = writeln!(buf, "{name}{{{hl}{labels}}} {v} {:.3}", ts(k));
            }
        };
        let used_per_node: f64 = h.vms.iter().map(|v| v.vm.mem_gib).sum::<f64>() / h.nodes as f64;
        match self {
            Family::HostInfo => gauge(format!(",hostname=\"{}\"", h.name), 1.0),
            Family::HostCpus => gauge(String::new(), h.cpus as f64),
            Family::NodeCpus => (0..h.nodes)
                .for_each(|n| gauge(format!(",node=\"{n}\""), (h.cpus / h.nodes) as f64)),
            Family::NodeFree => (0..h.nodes).for_each(|n| {
                let free = (h.mem_gib_per_node - used_per_node).max(0.0) * (1u64 << 30) as f64;
                gauge(format!(",node=\"{n}\""), free.round())
            }),
            Family::VmInfo => h
                .vms
                .iter()
                .for_each(|v| gauge(format!(",vm=\"{}\",uuid=\"{}\"", v.vm.name, v.uuid), 1.0)),
            Family::VmVcpus => h
                .vms
                .iter()
                .for_each(|v| gauge(format!(",vm=\"{}\"", v.vm.name), v.vm.vcpus as f64)),
            Family::VmMemory => h.vms.iter().for_each(|v| {
                gauge(
                    format!(",vm=\"{}\"", v.vm.name),
                    v.vm.mem_gib * (1u64 << 30) as f64,
                )
            }),
            Family::Run | Family::Wait => write_vcpus(buf, &name, &hl, h, runs, self, ts),
            Family::Idle => write_idle(buf, &name, &hl, h, runs, ts),
            Family::WaitBy => write_wait_by(buf, &name, &hl, h, runs, ts),
        }
    }
}

/// Each vCPU's share of its VM's run or wait, summed step by step.
fn write_vcpus(
    buf: &mut String,
    name: &str,
    hl: &str,
    h: &SynthHost,
    runs: &[HostRun],
    fam: Family,
    ts: &dyn Fn(usize) -> f64,
) {
    for (j, v) in h.vms.iter().enumerate() {
        let n = v.vm.vcpus as f64;
        for c in 0..v.vm.vcpus {
            let mut total = 0.0;
            for k in 0..=runs.len() {
                if k > 0 {
                    let r = &runs[k - 1];
                    let x = if matches!(fam, Family::Run) {
                        r.vm_run[j]
                    } else {
                        r.vm_wait[j]
                    };
                    total += x / n;
                }
                let _ = writeln!(
                    buf,
                    "{name}{{{hl},vm=\"{}\",vcpu=\"{c}\"}} {total:.6} {:.3}",
                    v.vm.name,
                    ts(k)
                );
            }
        }
    }
}

/// Idle time spread evenly over the CPUs; busy time as `user`.
fn write_idle(
    buf: &mut String,
    name: &str,
    hl: &str,
    h: &SynthHost,
    runs: &[HostRun],
    ts: &dyn Fn(usize) -> f64,
) {
    let n = h.cpus as f64;
    for cpu in 0..h.cpus {
        for mode in ["idle", "user"] {
            let mut total = 0.0;
            for k in 0..=runs.len() {
                if k > 0 {
                    let r = &runs[k - 1];
                    let idle = r.idle_cpu_s / n;
                    total += if mode == "idle" { idle } else { r.secs - idle };
                }
                let _ = writeln!(
                    buf,
                    "{name}{{{hl},cpu=\"{cpu}\",mode=\"{mode}\"}} {total:.6} {:.3}",
                    ts(k)
                );
            }
        }
    }
}

/// Each VM's wait charged to the other VMs by their run in the step.
fn write_wait_by(
    buf: &mut String,
    name: &str,
    hl: &str,
    h: &SynthHost,
    runs: &[HostRun],
    ts: &dyn Fn(usize) -> f64,
) {
    let nv = h.vms.len();
    for j in 0..nv {
        // Culprit totals per step, cumulated.
        let mut totals = vec![0.0f64; nv];
        let mut rows: Vec<Vec<f64>> = Vec::with_capacity(runs.len() + 1);
        rows.push(totals.clone());
        for r in runs {
            let others: f64 = (0..nv).filter(|&o| o != j).map(|o| r.vm_run[o]).sum();
            if others > 0.0 {
                for o in (0..nv).filter(|&o| o != j) {
                    totals[o] += r.vm_wait[j] * r.vm_run[o] / others;
                }
            }
            rows.push(totals.clone());
        }
        // The 5 largest culprits over the whole run, the rest as `other`.
        let mut order: Vec<usize> = (0..nv).filter(|&o| o != j).collect();
        order.sort_by(|a, b| totals[*b].total_cmp(&totals[*a]));
        let (top, rest) = order.split_at(order.len().min(5));
        let vm = &h.vms[j].vm.name;
        for &o in top {
            for (k, row) in rows.iter().enumerate() {
                let _ = writeln!(
                    buf,
                    "{name}{{{hl},vm=\"{vm}\",culprit_kind=\"vcpu\",culprit=\"{}\"}} {:.6} {:.3}",
                    h.vms[o].vm.name,
                    row[o],
                    ts(k)
                );
            }
        }
        for (k, row) in rows.iter().enumerate() {
            let other: f64 = rest.iter().map(|&o| row[o]).sum();
            let _ = writeln!(
                buf,
                "{name}{{{hl},vm=\"{vm}\",culprit_kind=\"other\",culprit=\"other\"}} {other:.6} {:.3}",
                ts(k)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_to_the_runs() {
        let hosts = synthetic(2, 3, 300.0, 7);
        let runs: Vec<Vec<HostRun>> = hosts.iter().map(|h| step_runs(h, 300.0, 1)).collect();
        let mut out = Vec::new();
        write(&mut out, &hosts, &runs, 300.0, 1_000_000.0, &[1]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("# EOF\n"));
        // The silent host exports `up 0` and nothing else.
        assert!(text.contains("up{instance=\"hv00001:9464\",job=\"stealscope\"} 0 1000900.000"));
        assert!(!text.contains("stealscope_host_cpus{instance=\"hv00001"));
        // The last wait sample of each vCPU sums to the VM's wait over the
        // three runs.
        let vm = &hosts[0].vms[0].vm;
        let want: f64 = runs[0].iter().map(|r| r.vm_wait[0]).sum();
        let got: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("stealscope_vcpu_wait_seconds_total")
                    && l.contains(&format!("vm=\"{}\"", vm.name))
                    && l.ends_with(" 1000900.000")
            })
            .map(|l| l.split(' ').nth(1).unwrap().parse::<f64>().unwrap())
            .sum();
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
        // Every VM of the live host is described.
        for v in &hosts[0].vms {
            assert!(text.contains(&format!("vm=\"{}\",uuid=\"{}\"", v.vm.name, v.uuid)));
        }
    }
}
