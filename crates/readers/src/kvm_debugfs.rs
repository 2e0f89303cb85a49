//! KVM statistics in debugfs (virt/kvm/kvm_main.c): one directory per VM
//! named "<pid>-<fd>", whose files are VM stats and vCPU stats summed over
//! the VM's vCPUs, plus vcpuN/pid (the vCPU thread id). Root only; files are
//! decimal text. Writing clears them, so we never write.

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const DIR: &str = "/sys/kernel/debug/kvm";

/// The statistics the host rules use (names from KVM_GENERIC_VCPU_STATS and
/// the x86 vCPU stats); others are not read, to keep scans cheap.
pub const STATS: &[&str] = &[
    "exits",
    "halt_exits",
    "halt_successful_poll",
    "halt_attempted_poll",
    "halt_poll_invalid",
    "halt_wakeup",
    "halt_poll_success_ns",
    "halt_poll_fail_ns",
    "halt_wait_ns",
    "irq_exits",
    "io_exits",
    "mmio_exits",
    "pf_taken",
    "preemption_reported",
];

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmVm {
    pub pid: u32,
    pub fd: u32,
    pub stats: BTreeMap<String, u64>,
    /// vCPU index -> thread id.
    pub vcpu_tids: BTreeMap<u32, u32>,
}

/// None when debugfs is not mounted or KVM is not loaded.
pub fn read(src: &dyn Source) -> Result<Option<Vec<KvmVm>>> {
    let Some(entries) = src.list(DIR)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for e in entries {
        let Some((pid, fd)) = e.split_once('-') else {
            continue;
        };
        let (Ok(pid), Ok(fd)) = (pid.parse(), fd.parse()) else {
            continue;
        };
        let dir = format!("{DIR}/{e}");
        let mut vm = KvmVm {
            pid,
            fd,
            ..Default::default()
        };
        for name in STATS {
            let path = format!("{dir}/{name}");
            if let Some(v) = src.read_value(&path)? {
                let n = v
                    .parse()
                    .map_err(|_| ReadError::parse(&path, format!("{v:?} is not a number")))?;
                vm.stats.insert(name.to_string(), n);
            }
        }
        for sub in src.list(&dir)?.unwrap_or_default() {
            let Some(idx) = sub.strip_prefix("vcpu").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let path = format!("{dir}/{sub}/pid");
            if let Some(v) = src.read_value(&path)? {
                let tid = v
                    .parse()
                    .map_err(|_| ReadError::parse(&path, format!("{v:?} is not a thread id")))?;
                vm.vcpu_tids.insert(idx, tid);
            }
        }
        out.push(vm);
    }
    Ok(Some(out))
}
