//! What a fleet planner needs from each host (`stealscope fleet`): the
//! host's name, CPUs, NUMA nodes and their free memory, and each VM's
//! identity and size. Bounded: per host 2 + 3 x nodes series, per VM 3.

use super::{family, Labels};
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::gauge::ConstGauge;
use std::fmt;
use stealscope_readers::numa::Node;

/// This machine, for the fleet view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFacts {
    /// /proc/sys/kernel/hostname (None: unreadable).
    pub hostname: Option<String>,
    /// NUMA nodes with their CPUs and memory (empty: no node directory).
    pub nodes: Vec<Node>,
}

/// One VM of the last host scan, named as its vCPU series are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmFacts {
    pub vm: String,
    /// From the command line (`-uuid`); empty when none is given.
    pub uuid: String,
    /// vCPU threads found.
    pub vcpus: u32,
    /// Boot memory from the command line (`-m`); None when not given.
    pub memory_bytes: Option<u64>,
}

/// The fleet families as they appear on the wire, for tests of the
/// shipped rules and dashboard (beside `FAMILIES`).
pub const FLEET_FAMILIES: [(&str, &str); 8] = [
    ("stealscope_host_info", "gauge"),
    ("stealscope_host_cpus", "gauge"),
    ("stealscope_numa_node_cpus", "gauge"),
    ("stealscope_numa_node_memory_bytes", "gauge"),
    ("stealscope_numa_node_memory_free_bytes", "gauge"),
    ("stealscope_vm_info", "gauge"),
    ("stealscope_vm_vcpus", "gauge"),
    ("stealscope_vm_memory_bytes", "gauge"),
];

fn gauge(v: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

pub(super) fn encode_fleet(
    host: &HostFacts,
    cpus: usize,
    vms: &[VmFacts],
    enc: &mut DescriptorEncoder,
) -> fmt::Result {
    family(
        enc,
        "stealscope_host_info",
        "1, labelled with this machine's hostname (the name a migration command targets).",
        host.hostname.iter().map(|h| {
            (
                vec![("hostname", h.clone())] as Labels,
                ConstGauge::new(1i64),
            )
        }),
    )?;
    family(
        enc,
        "stealscope_host_cpus",
        "CPUs this machine schedules on (per-CPU rows of /proc/stat).",
        (cpus > 0).then(|| (Labels::new(), gauge(cpus as u64))),
    )?;
    let node = |n: &Node| vec![("node", n.id.to_string())];
    family(
        enc,
        "stealscope_numa_node_cpus",
        "CPUs of each NUMA node (/sys/devices/system/node/nodeN/cpulist).",
        host.nodes
            .iter()
            .map(|n| (node(n), gauge(n.cpus.len() as u64))),
    )?;
    family(
        enc,
        "stealscope_numa_node_memory_bytes",
        "Memory of each NUMA node (nodeN/meminfo MemTotal).",
        host.nodes
            .iter()
            .filter_map(|n| Some((node(n), gauge(n.mem_total_kb? * 1024)))),
    )?;
    family(
        enc,
        "stealscope_numa_node_memory_free_bytes",
        "Free memory of each NUMA node (nodeN/meminfo MemFree): where a VM's memory could go.",
        host.nodes
            .iter()
            .filter_map(|n| Some((node(n), gauge(n.mem_free_kb? * 1024)))),
    )?;
    encode_vms(vms, enc)
}

fn encode_vms(vms: &[VmFacts], enc: &mut DescriptorEncoder) -> fmt::Result {
    family(
        enc,
        "stealscope_vm_info",
        "1 per VM, with its UUID when the VMM's command line gives one (libvirt's domain UUID), else uuid=\"\".",
        vms.iter().map(|v| {
            (
                vec![("vm", v.vm.clone()), ("uuid", v.uuid.clone())],
                ConstGauge::new(1i64),
            )
        }),
    )?;
    family(
        enc,
        "stealscope_vm_vcpus",
        "vCPU threads of each VM.",
        vms.iter()
            .map(|v| (vec![("vm", v.vm.clone())], gauge(v.vcpus as u64))),
    )?;
    family(
        enc,
        "stealscope_vm_memory_bytes",
        "Boot memory of each VM as its command line sets it (-m); absent when not given.",
        vms.iter()
            .filter_map(|v| Some((vec![("vm", v.vm.clone())], gauge(v.memory_bytes?)))),
    )
}

#[cfg(test)]
mod tests {
    use super::super::{Exporter, Format, MetricsState};
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn host_and_vm_facts_are_exported() {
        let s = MetricsState {
            host: HostFacts {
                hostname: Some("hv-7".into()),
                nodes: vec![
                    Node {
                        id: 0,
                        cpus: vec![0, 1],
                        mem_total_kb: Some(1000),
                        mem_free_kb: Some(400),
                        distances: None,
                    },
                    Node {
                        id: 1,
                        cpus: vec![2, 3],
                        mem_total_kb: None,
                        mem_free_kb: None,
                        distances: None,
                    },
                ],
            },
            vm_facts: vec![
                VmFacts {
                    vm: "web".into(),
                    uuid: "6a4e2f52-3c1b-4b8e-9b7a-0123456789ab".into(),
                    vcpus: 4,
                    memory_bytes: Some(4 << 30),
                },
                VmFacts {
                    vm: "fc".into(),
                    uuid: String::new(),
                    vcpus: 1,
                    memory_bytes: None,
                },
            ],
            ..Default::default()
        };
        let text = Exporter::new(Arc::new(Mutex::new(s)), "1").encode(Format::Text);
        for line in [
            "stealscope_host_info{hostname=\"hv-7\"} 1\n",
            "stealscope_numa_node_cpus{node=\"1\"} 2\n",
            "stealscope_numa_node_memory_free_bytes{node=\"0\"} 409600\n",
            "stealscope_vm_info{vm=\"web\",uuid=\"6a4e2f52-3c1b-4b8e-9b7a-0123456789ab\"} 1\n",
            "stealscope_vm_info{vm=\"fc\",uuid=\"\"} 1\n",
            "stealscope_vm_vcpus{vm=\"web\"} 4\n",
            "stealscope_vm_memory_bytes{vm=\"web\"} 4294967296\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        // Unknown stays absent, never 0.
        assert!(!text.contains("stealscope_numa_node_memory_free_bytes{node=\"1\"}"));
        assert!(!text.contains("stealscope_vm_memory_bytes{vm=\"fc\"}"));
        // No /proc/stat read yet: no CPU count.
        assert!(!text.contains("stealscope_host_cpus"));
    }
}
