//! The host part of the text reports: the hypervisor split, one row per
//! vCPU thread, and one line per KVM statistics source. Further host
//! tables (e.g. who made the vCPUs wait) go after `vm_table` in `section`.

use super::layout::Style;
use super::share;
use std::fmt::Write;
use stealscope_analysis::report::{Hypervisor, SourceStatus};
use stealscope_findings::units::PERCENT;
use stealscope_model::host::VmSteal;

/// What the host section says about each KVM statistics source.
pub(crate) struct KvmLines<'a> {
    pub debugfs: Option<&'a stealscope_analysis::report::KvmStats>,
    pub binary: Option<&'a SourceStatus>,
    pub exits: Option<&'a SourceStatus>,
}

/// The host section: summary line, the VM table, the sources.
pub(crate) fn section(
    out: &mut String,
    st: &Style,
    vms: &[VmSteal],
    hv: &Hypervisor,
    kvm: &KvmLines,
) {
    out.push('\n');
    st.wrap(
        out,
        &format!("{}: ", st.bold("Host")),
        &format!(
            "{} VM{}; vCPUs waited {} CPU-s while host CPUs idled {} CPU-s (busy steal {}, idle steal {})",
            vms.len(),
            if vms.len() == 1 { "" } else { "s" },
            stealscope_findings::units::num_text(hv.vcpu_wait_cpu_s),
            stealscope_findings::units::num_text(hv.host_idle_cpu_s),
            share(&hv.busy_steal_share),
            share(&hv.idle_steal_share)
        ),
    );
    vm_table(out, st, vms);
    sources(out, st, kvm);
}

/// One row per vCPU thread: its wait (host steal) and run time, % of wall
/// time, and where it may run. What kind of VM and how its vCPU threads
/// were identified follow the table, one line per combination.
pub(crate) fn vm_table(out: &mut String, st: &Style, vms: &[VmSteal]) {
    let _ = writeln!(
        out,
        "\n  {:<18}  {:>7}  {:>4}  {:>7}  {:>6}  {:>5}  CPUs",
        "VM", "pid", "vCPU", "tid", "steal%", "util%"
    );
    for vm in vms {
        for (i, c) in vm.vcpus.iter().enumerate() {
            let (name, pid) = if i == 0 {
                (vm.name.as_str(), vm.pid.to_string())
            } else {
                ("", String::new())
            };
            let cpus = c
                .cpus_allowed
                .as_ref()
                .map(|v| stealscope_readers::cpulist::format(v))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<18.18}  {:>7}  {:>4}  {:>7}  {}  {}  {}",
                name,
                pid,
                c.index,
                c.tid,
                PERCENT.width(6).render(Some(c.host_steal_pct)),
                PERCENT.width(5).render(Some(c.util_pct)),
                cpus
            );
        }
        if vm.vcpus.is_empty() {
            let _ = writeln!(
                out,
                "  {:<18.18}  {:>7}  (no vCPU threads identified)",
                vm.name, vm.pid
            );
        }
    }
    // (kind, source) -> VM names, in table order.
    let mut kinds: Vec<((&str, &str), Vec<&str>)> = Vec::new();
    for vm in vms {
        let key = (vm.kind, vm.vcpu_source);
        match kinds.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(&vm.name),
            None => kinds.push((key, vec![&vm.name])),
        }
    }
    for ((kind, by), names) in kinds {
        let by = if by.is_empty() {
            String::new()
        } else {
            format!(", vCPU threads by {by}")
        };
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        st.items(out, &format!("  {kind}{by}: "), &names, ", ");
    }
}

fn sources(out: &mut String, st: &Style, kvm: &KvmLines) {
    if let Some(s) = kvm
        .debugfs
        .and_then(stealscope_analysis::report::KvmStats::missing)
    {
        st.wrap(out, "  KVM debugfs: ", s);
    }
    if let Some(b) = kvm.binary {
        st.wrap(out, "  KVM binary stats: ", &b.detail);
    }
    if let Some(e) = kvm.exits {
        st.wrap(out, "  KVM exits: ", &e.detail);
    }
}
