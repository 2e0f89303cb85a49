//! Guest-side rules, one file per area. Each rule looks at the model and
//! pushes zero or more findings; thresholds are named constants with the
//! reason next to them.

use crate::finding::Finding;
use stealscope_model::MachineModel;

pub mod clock;
pub mod expected_share;
pub mod fair_share;
pub mod host;
pub mod host_groups;
pub mod host_noisy;
pub mod host_starved;
pub mod host_steal;
pub mod host_who;
pub mod idle;
pub mod irq;
pub mod mitigation;
pub mod steal;
pub mod tuning;
pub mod weight_fix;

pub type RuleFn = fn(&MachineModel, &mut Vec<Finding>);

/// Every rule (guest and host) with the finding ids it may raise.
pub const GUEST_RULES: &[(&[&str], RuleFn)] = &[
    (&["steal.busy", "steal.idle"], steal::busy_idle),
    (&["steal.bursty"], steal::bursty),
    (&["steal.ipc-collapse"], steal::ipc_collapse),
    (&["steal.counter-anomaly"], steal::counter_anomaly),
    (&["idle.haltpoll-inactive"], idle::haltpoll_inactive),
    (&["idle.deep-cstates"], idle::deep_cstates),
    (&["clock.unstable"], clock::unstable),
    (
        &["mitigation.kpti-without-pcid"],
        mitigation::kpti_without_pcid,
    ),
    (&["irq.storm"], irq::storm),
    (&["tuning.io-scheduler"], tuning::io_scheduler),
    (&["tuning.cpufreq-governor"], tuning::cpufreq_governor),
    (&["tuning.dirty-writeback"], tuning::dirty_writeback),
    (&["host.steal.busy", "host.steal.idle"], host_steal::steal),
    (&["host.noisy-neighbor"], host_noisy::noisy_neighbor),
    (&["host.idle-vm-penalty"], host::idle_vm_penalty),
    (&["host.numa-balancing"], host::numa_balancing),
    (&["host.vm-spans-nodes"], host::vm_spans_nodes),
    (
        &["host.cgroup-weight-unfair"],
        host_groups::cgroup_weight_unfair,
    ),
    (&["host.kvmclock-ipi-storm"], host::kvmclock_ipi_storm),
    (&["host.no-ept"], host::no_ept),
    (&["host.hlt-exits-dominant"], host::hlt_exits_dominant),
    (&["host.swap-pressure"], host::swap_pressure),
    (&["host.starved"], host_starved::starved),
    (&["host.capture-overran"], host_starved::capture_overran),
];

/// Rules about the steal and idling of this machine's own vCPUs. On a host
/// that is not itself a guest they have nothing to measure and do not run;
/// the other guest rules run there too and word their findings for a host
/// (see [`crate::roles::Roles::host_only`]).
pub const GUEST_ONLY: &[&str] = &["steal.busy", "steal.bursty", "idle.haltpoll-inactive"];

pub fn run_guest(m: &MachineModel) -> Vec<Finding> {
    let host_only = crate::roles::Roles::of(m).host_only();
    let mut out = Vec::new();
    for (ids, rule) in GUEST_RULES {
        if host_only && ids.iter().any(|id| GUEST_ONLY.contains(id)) {
            continue;
        }
        rule(m, &mut out);
    }
    out
}
