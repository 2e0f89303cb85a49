//! The fair-share model the host rules judge by (`host.noisy-neighbor`
//! and `host.cgroup-weight-unfair` alike): every runnable thread on the
//! host gets the same CPU, capped at what it wanted (max-min fairness, as
//! CFS gives threads of equal weight in one group). A thread's demand is
//! its run plus its run-queue wait over the interval, in CPUs (at most 1);
//! the water level is the CPU each thread that wanted more got. What a
//! thread wanted beyond the level is its fair wait.
//!
//! Threads are vCPUs (their schedstat), a VM's emulator threads (their run
//! time) and the host's other work (per process or kernel-thread class,
//! split into whole-CPU units: its thread count is not kept).

use stealscope_model::MachineModel;
use stealscope_who::Kind;

use super::host_who::Who;

/// The host's water level and what it was computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fair {
    pub cpus: f64,
    /// Runnable demand of every thread, in CPUs.
    pub demand: f64,
    /// The CPU each thread gets at most (1.0: the host had room for all).
    pub level: f64,
}

/// One thread's demand in CPUs from its run and wait percentages.
pub fn thread_demand(util_pct: f64, steal_pct: f64) -> f64 {
    ((util_pct + steal_pct) / 100.0).clamp(0.0, 1.0)
}

/// Demand of work measured as a whole (a process, a class) in whole-CPU
/// units: 1.3 CPUs is one unit of 1.0 and one of 0.3.
pub(super) fn units(cpus: f64) -> impl Iterator<Item = f64> {
    let cpus = cpus.max(0.0);
    let whole = cpus.floor() as usize;
    let rest = cpus - whole as f64;
    std::iter::repeat_n(1.0, whole).chain((rest > 1e-9).then_some(rest))
}

/// Every runnable thread's demand on the host.
fn demands(m: &MachineModel) -> Vec<f64> {
    let mut d: Vec<f64> = Vec::new();
    for vm in &m.host.vms {
        d.extend(
            vm.vcpus
                .iter()
                .map(|c| thread_demand(c.util_pct, c.host_steal_pct)),
        );
        d.extend(
            vm.others
                .iter()
                .filter_map(|o| o.util_pct)
                .map(|u| thread_demand(u, 0.0)),
        );
    }
    let w = &m.host.host_work;
    let listed: f64 = w.top.iter().map(|i| i.run_cpus + i.wait_cpus).sum();
    for i in &w.top {
        d.extend(units(i.run_cpus + i.wait_cpus));
    }
    d.extend(units(w.runnable_cpus() - listed));
    d
}

/// The level `l` at which `sum(min(d, l)) = min(cpus, sum(d))`.
pub(super) fn water_level(demands: &[f64], cpus: f64) -> f64 {
    let total: f64 = demands.iter().sum();
    if total <= cpus || demands.is_empty() {
        return 1.0;
    }
    let mut d = demands.to_vec();
    d.sort_by(|a, b| a.total_cmp(b));
    let mut left = cpus;
    for (i, &x) in d.iter().enumerate() {
        let rest = (d.len() - i) as f64;
        if x * rest >= left {
            return left / rest;
        }
        left -= x;
    }
    1.0
}

impl Fair {
    pub fn of(m: &MachineModel) -> Fair {
        let cpus = m.interval.cpus.len() as f64;
        let d = demands(m);
        Fair {
            cpus,
            demand: d.iter().sum(),
            level: water_level(&d, cpus),
        }
    }

    /// CPU a thread wanting `demand` CPUs gets when all share fairly.
    pub fn cpu(&self, demand: f64) -> f64 {
        demand.min(self.level)
    }

    /// Its fair run-queue wait, % of wall time.
    pub fn wait_pct(&self, demand: f64) -> f64 {
        100.0 * (demand - self.cpu(demand)).max(0.0)
    }

    /// A culprit's (fair CPUs, CPUs it ran); None for what has no share to
    /// judge by (`unknown`: idle or untraced time). Interrupts are entitled
    /// to none: they preempt every thread.
    pub fn of_culprit(&self, m: &MachineModel, w: &Who) -> Option<(f64, f64)> {
        let vm = || {
            m.host
                .vms
                .iter()
                .find(|v| Some(&v.name) == w.culprit.vm.as_ref())
        };
        match w.culprit.kind {
            Kind::Vcpu => {
                let v = vm()?;
                let fair = v
                    .vcpus
                    .iter()
                    .map(|c| self.cpu(thread_demand(c.util_pct, c.host_steal_pct)))
                    .sum();
                let ran = v.vcpus.iter().map(|c| c.util_pct / 100.0).sum();
                Some((fair, ran))
            }
            Kind::Vmm => {
                let v = vm()?;
                let run: Vec<f64> = v.others.iter().filter_map(|o| o.util_pct).collect();
                let fair = run.iter().map(|u| self.cpu(thread_demand(*u, 0.0))).sum();
                Some((fair, run.iter().sum::<f64>() / 100.0))
            }
            Kind::HostProcess | Kind::HostKthread => {
                let i = m.host.host_work.top.iter().find(|i| {
                    i.culprit.kind == w.culprit.kind
                        && i.culprit.name == w.culprit.name
                        && i.culprit.pid == w.culprit.pid
                })?;
                let fair = units(i.run_cpus + i.wait_cpus).map(|d| self.cpu(d)).sum();
                Some((fair, i.run_cpus))
            }
            Kind::Irq => Some((0.0, 0.0)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_level_shares_what_is_left_by_small_demands() {
        // Four busy threads on two CPUs: half a CPU each.
        assert!((water_level(&[1.0; 4], 2.0) - 0.5).abs() < 1e-12);
        // A thread wanting 0.2 gets it; three busy ones share 1.8.
        assert!((water_level(&[0.2, 1.0, 1.0, 1.0], 2.0) - 0.6).abs() < 1e-12);
        // Room for everyone.
        assert_eq!(water_level(&[0.5, 0.5], 2.0), 1.0);
        assert_eq!(water_level(&[], 2.0), 1.0);
    }

    #[test]
    fn whole_cpu_units() {
        let u: Vec<f64> = units(2.25).collect();
        assert_eq!(u.len(), 3);
        assert!((u.iter().sum::<f64>() - 2.25).abs() < 1e-12);
        assert_eq!(units(0.0).count(), 0);
    }
}
