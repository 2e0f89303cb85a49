//! Reads the fleet from Prometheus in four aggregated instant queries:
//! 1. inventory: every host and VM fact series and `up`, in one selector
//!    on `__name__`;
//! 2. demand history: each VM's run and run + wait rate per step (told
//!    apart by a `part` label), as one subquery over the window, from which
//!    [`crate::want`] estimates what it wants;
//! 3. wait and busy steal: each VM's mean wait over the window, and each
//!    host's busy steal, split at every step of the history (wait less
//!    idle CPU time, at least 0) and averaged (one `or`, told apart by the
//!    `vm` label);
//! 4. who stole it: each VM's wait by culprit over the window.
//!
//! Their cost (time, series, samples Prometheus read) is kept in
//! `Prom::costs`.

use crate::error::FleetError;
use crate::model::{Culprit, Fleet, Host, HostKey, NodeMem, Unseen, Vm};
use crate::prom::{Prom, Series};
use crate::want::want;
use std::collections::{BTreeMap, BTreeSet};
use stealscope_who::Kind;

/// What to read.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Label matchers added to every selector (`job="stealscope"`).
    pub selector: String,
    /// Prometheus duration of the past to read (`1h`).
    pub window: String,
    /// Points of the demand history over the window.
    pub steps: u32,
}

/// A culprit counts as host.noisy-neighbor's (rules/host_steal.rs
/// NOISY_SHARE) from a quarter of the other VMs' wait.
pub const NOISY_SHARE: f64 = 0.25;

const INVENTORY: &str = "up|stealscope_(host_info|host_cpus|numa_node_memory_free_bytes|vm_info|vm_vcpus|vm_memory_bytes)";

/// Seconds of a Prometheus duration (`90s`, `30m`, `1h`, `1d`, `1h30m`).
pub fn duration_s(s: &str) -> Option<f64> {
    let (mut total, mut num) = (0.0, String::new());
    let mut any = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('s', _) => 1.0,
            ('m', _) => 60.0,
            ('h', _) => 3600.0,
            ('d', _) => 86_400.0,
            ('w', _) => 604_800.0,
            ('y', _) => 31_536_000.0,
            _ => return None,
        };
        total += num.parse::<f64>().ok()? * unit;
        num.clear();
        any = true;
    }
    (any && num.is_empty() && total > 0.0).then_some(total)
}

fn check_selector(sel: &str) -> Result<(), FleetError> {
    let bad = sel.contains(['{', '}']) || (!sel.trim().is_empty() && !sel.contains(['=', '~']));
    if bad {
        return Err(FleetError::Selector(sel.to_string()));
    }
    Ok(())
}

/// `{a="b",SEL}` with the selector appended.
fn sel(base: &str, extra: &str) -> String {
    match (base.is_empty(), extra.trim().is_empty()) {
        (_, true) => format!("{{{base}}}"),
        (true, false) => format!("{{{extra}}}"),
        (false, false) => format!("{{{base},{extra}}}"),
    }
}

pub fn read(prom: &mut Prom, o: &ReadOptions) -> Result<Fleet, FleetError> {
    check_selector(&o.selector)?;
    let window_s = duration_s(&o.window).ok_or_else(|| FleetError::Window(o.window.clone()))?;
    let step_s = (window_s / o.steps.max(1) as f64).max(1.0).round();
    let w = &o.window;
    let s = format!("{step_s}s");
    let inv = prom.query(
        "inventory",
        &sel(&format!("__name__=~\"{INVENTORY}\""), &o.selector),
    )?;
    let demand = prom.query(
        "demand",
        &format!(
            "(label_replace(sum by (instance, job, vm) (rate(stealscope_vcpu_run_seconds_total{0}[{s}])), \"part\", \"run\", \"vm\", \".*\") or sum by (instance, job, vm) (rate(stealscope_vcpu_run_seconds_total{0}[{s}]) + rate(stealscope_vcpu_wait_seconds_total{0}[{s}])))[{w}:{s}]",
            sel("", &o.selector)
        ),
    )?;
    let wait_idle = prom.query(
        "wait-busy",
        &format!(
            "sum by (instance, job, vm) (rate(stealscope_vcpu_wait_seconds_total{0}[{w}])) or avg_over_time(clamp_min(sum by (instance, job) (rate(stealscope_vcpu_wait_seconds_total{0}[{s}])) - sum by (instance, job) (rate(stealscope_cpu_seconds_total{1}[{s}])), 0)[{w}:{s}])",
            sel("", &o.selector),
            sel("mode=~\"idle|iowait\"", &o.selector)
        ),
    )?;
    let culprits = prom.query(
        "culprits",
        &format!(
            "sum by (instance, job, vm, culprit_kind, culprit) (rate(stealscope_vm_wait_by_seconds_total{}[{w}]))",
            sel("", &o.selector)
        ),
    )?;
    let mut fleet = assemble(&inv, &demand, &wait_idle, &culprits, window_s, step_s);
    if fleet.hosts.is_empty() {
        return Err(FleetError::NoHosts {
            url: prom.url().to_string(),
            sel: if o.selector.is_empty() {
                String::new()
            } else {
                format!(" matching {{{}}}", o.selector)
            },
        });
    }
    fleet.unseen.sort();
    fleet.unseen.dedup();
    Ok(fleet)
}

fn key(s: &Series) -> HostKey {
    HostKey {
        instance: s.label("instance").to_string(),
        job: s.label("job").to_string(),
    }
}

#[derive(Default)]
struct Partial {
    hostname: Option<String>,
    cpus: Option<u32>,
    nodes: Vec<NodeMem>,
    up: Option<bool>,
    vms: BTreeMap<String, Vm>,
    has_vcpu_series: bool,
    /// Per VM, CPUs its vCPUs ran, per step (`demand` holds run + wait).
    run: BTreeMap<String, Vec<f64>>,
    busy: f64,
    /// (victim VM, culprit kind, culprit) -> wait.
    wait_by: Vec<(String, String, String, f64)>,
}

fn vm_entry<'a>(p: &'a mut Partial, name: &str) -> &'a mut Vm {
    p.vms.entry(name.to_string()).or_insert_with(|| Vm {
        name: name.to_string(),
        uuid: String::new(),
        vcpus: 0,
        memory_bytes: None,
        demand: Vec::new(),
        wait: 0.0,
        run: 0.0,
    })
}

/// Builds hosts from the four answers; what is missing goes to `unseen`.
pub fn assemble(
    inv: &[Series],
    demand: &[Series],
    wait_idle: &[Series],
    culprits: &[Series],
    window_s: f64,
    step_s: f64,
) -> Fleet {
    let mut by: BTreeMap<HostKey, Partial> = BTreeMap::new();
    for s in inv {
        let p = by.entry(key(s)).or_default();
        let v = s.value();
        match s.label("__name__") {
            "up" => p.up = Some(v >= 1.0),
            "stealscope_host_info" => p.hostname = Some(s.label("hostname").to_string()),
            "stealscope_host_cpus" => p.cpus = Some(v as u32),
            "stealscope_numa_node_memory_free_bytes" => p.nodes.push(NodeMem {
                node: s.label("node").parse().unwrap_or(0),
                free_bytes: v.max(0.0) as u64,
            }),
            "stealscope_vm_info" => vm_entry(p, s.label("vm")).uuid = s.label("uuid").to_string(),
            "stealscope_vm_vcpus" => vm_entry(p, s.label("vm")).vcpus = v as u32,
            "stealscope_vm_memory_bytes" => {
                vm_entry(p, s.label("vm")).memory_bytes = Some(v.max(0.0) as u64)
            }
            _ => {}
        }
    }
    let times = history_times(demand);
    for s in demand {
        let p = by.entry(key(s)).or_default();
        p.has_vcpu_series = true;
        let h = align(s, &times);
        match s.labels.get("part").map(String::as_str) {
            Some("run") => {
                p.run.insert(s.label("vm").to_string(), h);
            }
            _ => vm_entry(p, s.label("vm")).demand = h,
        }
    }
    for s in wait_idle {
        let p = by.entry(key(s)).or_default();
        match s.labels.get("vm") {
            Some(vm) => {
                p.has_vcpu_series = true;
                vm_entry(p, vm).wait = s.value().max(0.0);
            }
            None => p.busy = s.value().max(0.0),
        }
    }
    for s in culprits {
        let p = by.entry(key(s)).or_default();
        p.wait_by.push((
            s.label("vm").to_string(),
            s.label("culprit_kind").to_string(),
            s.label("culprit").to_string(),
            s.value().max(0.0),
        ));
    }
    let mut fleet = Fleet {
        window_s,
        step_s,
        hosts: Vec::new(),
        unseen: Vec::new(),
    };
    for (k, p) in by {
        if let Some(h) = host_of(k, p, &mut fleet.unseen) {
            fleet.hosts.push(h);
        }
    }
    fleet
}

/// Every evaluation time of the demand subquery, in order.
fn history_times(demand: &[Series]) -> Vec<i64> {
    let set: BTreeSet<i64> = demand
        .iter()
        .flat_map(|s| s.points.iter().map(|p| (p.0 * 1000.0).round() as i64))
        .collect();
    set.into_iter().collect()
}

/// A series on the common times; a gap takes the series' mean.
fn align(s: &Series, times: &[i64]) -> Vec<f64> {
    let finite: Vec<f64> = s
        .points
        .iter()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .collect();
    let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
    let at: BTreeMap<i64, f64> = s
        .points
        .iter()
        .filter(|p| p.1.is_finite())
        .map(|p| ((p.0 * 1000.0).round() as i64, p.1.max(0.0)))
        .collect();
    times.iter().map(|t| *at.get(t).unwrap_or(&mean)).collect()
}

fn host_of(k: HostKey, p: Partial, unseen: &mut Vec<Unseen>) -> Option<Host> {
    let Some(cpus) = p.cpus.filter(|c| *c > 0) else {
        if p.up == Some(false) && !p.has_vcpu_series {
            unseen.push(Unseen::TargetDown {
                instance: k.instance,
                job: k.job,
            });
        } else if p.has_vcpu_series || !p.vms.is_empty() {
            unseen.push(Unseen::NoHostFacts {
                instance: k.instance,
                job: k.job,
            });
        } else if p.up == Some(true) {
            // Scraped but exports nothing of ours: not a stealscope host.
        }
        return None;
    };
    let name = p
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| k.instance.clone());
    if p.nodes.is_empty() {
        unseen.push(Unseen::NoNodeMemory { host: name.clone() });
    }
    let culprits = culprits_of(&p.wait_by);
    let mut vms: Vec<Vm> = p.vms.into_values().collect();
    for v in &mut vms {
        match p.run.get(&v.name) {
            Some(run) => {
                v.run = run.iter().sum::<f64>() / run.len().max(1) as f64;
                v.demand = want(run, &v.demand, v.vcpus);
            }
            None => v.run = (v.mean_demand() - v.wait).max(0.0),
        }
    }
    for v in &vms {
        let missing: Vec<&str> = [
            (v.vcpus == 0, "vCPU count"),
            (v.memory_bytes.is_none(), "memory size"),
            (v.demand.is_empty(), "demand history"),
        ]
        .iter()
        .filter(|m| m.0)
        .map(|m| m.1)
        .collect();
        if !missing.is_empty() {
            unseen.push(Unseen::VmPartial {
                host: name.clone(),
                vm: v.name.clone(),
                missing: missing.join(", "),
            });
        }
    }
    let mut nodes = p.nodes;
    nodes.sort_by_key(|n| n.node);
    Some(Host {
        key: k,
        name,
        cpus,
        nodes,
        vms,
        busy: p.busy,
        culprits,
    })
}

/// VMs whose vCPUs took at least [`NOISY_SHARE`] of the other VMs' wait
/// (a VM delaying its own vCPUs is no neighbour's doing).
fn culprits_of(wait_by: &[(String, String, String, f64)]) -> Vec<Culprit> {
    let total: f64 = wait_by.iter().map(|w| w.3).sum();
    if total <= 0.0 {
        return Vec::new();
    }
    let mut by: BTreeMap<&str, f64> = BTreeMap::new();
    for (victim, kind, culprit, w) in wait_by {
        let of_vm = Kind::parse(kind).is_some_and(Kind::is_vm);
        if of_vm && culprit != victim {
            *by.entry(culprit.as_str()).or_default() += w;
        }
    }
    let mut out: Vec<Culprit> = by
        .into_iter()
        .map(|(vm, w)| Culprit {
            vm: vm.to_string(),
            share: w / total,
        })
        .filter(|c| c.share >= NOISY_SHARE)
        .collect();
    out.sort_by(|a, b| b.share.total_cmp(&a.share));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration_s("1h"), Some(3600.0));
        assert_eq!(duration_s("1h30m"), Some(5400.0));
        assert_eq!(duration_s("90s"), Some(90.0));
        assert_eq!(duration_s("1d"), Some(86400.0));
        assert_eq!(duration_s("5"), None);
        assert_eq!(duration_s("1x"), None);
        assert_eq!(duration_s(""), None);
    }

    fn series(labels: &[(&str, &str)], points: &[f64]) -> Series {
        Series {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            points: points
                .iter()
                .enumerate()
                .map(|(i, v)| (900.0 * i as f64, *v))
                .collect(),
        }
    }

    #[test]
    fn demand_is_run_when_served_and_run_plus_wait_when_starved() {
        let h = [("instance", "a:9464"), ("job", "j")];
        let with = |more: &[(&'static str, &'static str)]| {
            let mut l = h.to_vec();
            l.extend_from_slice(more);
            l
        };
        let inv = vec![
            series(&with(&[("__name__", "stealscope_host_cpus")]), &[8.0]),
            series(
                &with(&[("__name__", "stealscope_vm_vcpus"), ("vm", "v")]),
                &[2.0],
            ),
        ];
        // Step 0: ran 1.0 of its 2 vCPUs, queued 0.3 (served); step 1:
        // ran 1.5 and runnable all the time (starved).
        let demand = vec![
            series(&with(&[("vm", "v"), ("part", "run")]), &[1.0, 1.5]),
            series(&with(&[("vm", "v")]), &[1.3, 2.0]),
        ];
        let f = assemble(&inv, &demand, &[], &[], 1800.0, 900.0);
        let v = &f.hosts[0].vms[0];
        assert_eq!(v.demand, vec![1.0, 2.0]);
        assert!((v.run - 1.25).abs() < 1e-9, "{}", v.run);
    }

    #[test]
    fn selectors() {
        assert!(check_selector("job=\"stealscope\",dc=~\"eu.*\"").is_ok());
        assert!(check_selector("").is_ok());
        assert!(check_selector("{job=\"x\"}").is_err());
        assert!(check_selector("stealscope").is_err());
        assert_eq!(sel("a=\"b\"", "job=\"x\""), "{a=\"b\",job=\"x\"}");
        assert_eq!(sel("", ""), "{}");
    }
}
