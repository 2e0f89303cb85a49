//! A simulated fleet written as `stealscope serve` would have exported it,
//! scraped every step: OpenMetrics text with timestamps, for `promtool tsdb
//! create-blocks-from openmetrics` to backfill into a Prometheus TSDB, so
//! that `stealscope fleet` is checked against a real Prometheus.
//!
//! The fleet ([`synthetic`]): hosts of 16 CPUs in 2 nodes, each filled
//! with VMs of 1-8 vCPUs to 1.5 vCPUs per CPU (2 GiB per vCPU, 48 GiB per
//! node), whose demand follows a daily wave around a per-host level (one
//! host in four runs hot, filled to 2 vCPUs per CPU: busy steal), and a
//! few hosts whose VMs are all pinned to 4 CPUs while the rest idle (idle
//! steal, which `place` fixes on the host). Each step of each host is one
//! run of [`crate::measured::run_measured`] at that step's levels.
//!
//! Who stole it (`stealscope_vm_wait_by_seconds_total`) is modelled, not
//! simulated: on a host whose CPUs are all busy, a vCPU waits while the
//! others run, so each VM's wait is charged to the other VMs in proportion
//! to their run time in that step (top 5 kept, the rest as `other`).

use crate::measured::{run_steps, HostRun, MeasuredVm};
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
    synthetic_sized(hosts, 16, steps, step_s, seed)
}

/// As [`synthetic`], with hosts of `cpus` CPUs (3 GiB per CPU per node):
/// 28 CPUs make about 15 VMs a host, the scale benchmark's fleet.
pub fn synthetic_sized(
    hosts: u32,
    cpus: u32,
    steps: usize,
    step_s: f64,
    seed: u64,
) -> Vec<SynthHost> {
    (0..hosts)
        .map(|i| synth_host(i, cpus, steps, step_s, seed))
        .collect()
}

fn synth_host(i: u32, cpus: u32, steps: usize, step_s: f64, seed: u64) -> SynthHost {
    let mut rng = Rng(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // The first draws of neighbouring seeds are alike: skip them.
    for _ in 0..8 {
        rng.unit();
    }
    // Most hosts moderate, one in four hot; one in 20 with its VMs pinned.
    let hot = rng.unit() < 0.25;
    let heat = if hot {
        0.7 + 0.3 * rng.unit()
    } else {
        0.25 + 0.25 * rng.unit()
    };
    // Hot hosts were also filled further: 2 vCPUs per CPU.
    let cap = if hot { cpus * 2 } else { cpus * 3 / 2 };
    let pinned = rng.unit() < 0.05;
    let mut vms = Vec::new();
    let mut vcpus_used = 0;
    while vcpus_used < cap {
        let vcpus = [1u32, 1, 2, 2, 2, 4, 4, 8][(rng.unit() * 8.0) as usize % 8];
        if vcpus_used + vcpus > cap {
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
                mem_gib: 2.0 * vcpus as f64,
                levels: levels.into(),
                pinned: pinned.then(|| (0..4).collect()),
            },
            uuid: uuid(&mut rng),
        });
    }
    SynthHost {
        name: format!("hv{i:05}"),
        cpus,
        nodes: 2,
        mem_gib_per_node: 3.0 * cpus as f64,
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
    run_steps(h.cpus, &h.measured(), step_s, seed)
}

/// How the series are written: scraped `scrapes_per_step` times per step
/// from `start_unix` (counters start at 0 and grow evenly within a step,
/// as a constant demand makes them); `silent` hosts export only `up 0` (a
/// target with no serve).
#[derive(Debug, Clone)]
pub struct WriteSpec {
    pub step_s: f64,
    pub scrapes_per_step: usize,
    pub start_unix: f64,
    pub silent: Vec<usize>,
}

/// Writes every host's series; `runs[h]` are `step_runs` of host h.
pub fn write(
    out: &mut dyn Write,
    hosts: &[SynthHost],
    runs: &[Vec<HostRun>],
    spec: &WriteSpec,
) -> io::Result<()> {
    let silent = &spec.silent;
    let live: Vec<usize> = (0..hosts.len()).filter(|i| !silent.contains(i)).collect();
    let sub = spec.scrapes_per_step.max(1);
    let steps = runs.iter().map(Vec::len).max().unwrap_or(0) * sub;
    let every = spec.step_s / sub as f64;
    let ts = |k: usize| spec.start_unix + k as f64 * every;
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
            fam.write(&mut buf, &hosts[i], &runs[i], (steps, sub), &ts);
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
        (steps, sub): (usize, usize),
        ts: &dyn Fn(usize) -> f64,
    ) {
        let hl = host_labels(h);
        let c = Counters { steps, sub, ts };
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
            Family::Run | Family::Wait => write_vcpus(buf, &name, &hl, h, runs, self, &c),
            Family::Idle => write_idle(buf, &name, &hl, h, runs, &c),
            Family::WaitBy => write_wait_by(buf, &name, &hl, h, runs, &c),
        }
    }
}

/// Scrape times of the counters: `sub` per step, `steps` in all.
struct Counters<'a> {
    steps: usize,
    sub: usize,
    ts: &'a dyn Fn(usize) -> f64,
}

impl Counters<'_> {
    /// One counter series from its increase in each step.
    fn emit(&self, buf: &mut String, series: &str, incs: &[f64]) {
        let mut base = 0.0;
        for m in 0..=self.steps {
            let (k, part) = (m / self.sub, m % self.sub);
            if part == 0 && k > 0 {
                base += incs.get(k - 1).copied().unwrap_or(0.0);
            }
            let within = incs.get(k).copied().unwrap_or(0.0) * part as f64 / self.sub as f64;
            let _ = writeln!(buf, "{series} {:.6} {:.3}", base + within, (self.ts)(m));
        }
    }
}

/// Each vCPU's share of its VM's run or wait.
fn write_vcpus(
    buf: &mut String,
    name: &str,
    hl: &str,
    h: &SynthHost,
    runs: &[HostRun],
    fam: Family,
    c: &Counters,
) {
    for (j, v) in h.vms.iter().enumerate() {
        let n = v.vm.vcpus as f64;
        let incs: Vec<f64> = runs
            .iter()
            .map(|r| match fam {
                Family::Run => r.vm_run[j] / n,
                _ => r.vm_wait[j] / n,
            })
            .collect();
        for cpu in 0..v.vm.vcpus {
            let series = format!("{name}{{{hl},vm=\"{}\",vcpu=\"{cpu}\"}}", v.vm.name);
            c.emit(buf, &series, &incs);
        }
    }
}

/// Idle time spread evenly over the CPUs (the one mode the fleet reads).
fn write_idle(
    buf: &mut String,
    name: &str,
    hl: &str,
    h: &SynthHost,
    runs: &[HostRun],
    c: &Counters,
) {
    let n = h.cpus as f64;
    let incs: Vec<f64> = runs.iter().map(|r| r.idle_cpu_s / n).collect();
    for cpu in 0..h.cpus {
        let series = format!("{name}{{{hl},cpu=\"{cpu}\",mode=\"idle\"}}");
        c.emit(buf, &series, &incs);
    }
}

/// Each VM's wait charged to the other VMs by their run in the step.
fn write_wait_by(
    buf: &mut String,
    name: &str,
    hl: &str,
    h: &SynthHost,
    runs: &[HostRun],
    c: &Counters,
) {
    let nv = h.vms.len();
    for j in 0..nv {
        // incs[o][k]: culprit o's charge in step k.
        let mut incs = vec![vec![0.0f64; runs.len()]; nv];
        for (k, r) in runs.iter().enumerate() {
            let others: f64 = (0..nv).filter(|&o| o != j).map(|o| r.vm_run[o]).sum();
            if others > 0.0 {
                for o in (0..nv).filter(|&o| o != j) {
                    incs[o][k] = r.vm_wait[j] * r.vm_run[o] / others;
                }
            }
        }
        // The 5 largest culprits over the whole run, the rest as `other`.
        let total = |o: usize| incs[o].iter().sum::<f64>();
        let mut order: Vec<usize> = (0..nv).filter(|&o| o != j).collect();
        order.sort_by(|a, b| total(*b).total_cmp(&total(*a)));
        let (top, rest) = order.split_at(order.len().min(5));
        let vm = &h.vms[j].vm.name;
        for &o in top {
            let series = format!(
                "{name}{{{hl},vm=\"{vm}\",culprit_kind=\"vcpu\",culprit=\"{}\"}}",
                h.vms[o].vm.name
            );
            c.emit(buf, &series, &incs[o]);
        }
        let other: Vec<f64> = (0..runs.len())
            .map(|k| rest.iter().map(|&o| incs[o][k]).sum())
            .collect();
        let series = format!("{name}{{{hl},vm=\"{vm}\",culprit_kind=\"other\",culprit=\"other\"}}");
        c.emit(buf, &series, &other);
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
        let spec = WriteSpec {
            step_s: 300.0,
            scrapes_per_step: 2,
            start_unix: 1_000_000.0,
            silent: vec![1],
        };
        write(&mut out, &hosts, &runs, &spec).unwrap();
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
