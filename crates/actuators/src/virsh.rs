//! libvirt-managed VMs: their knobs belong to libvirt, so changes go
//! through `virsh` with `--live --config` (the running domain and its XML
//! agree, and a restart keeps the placement).

use crate::error::ApplyError;
use std::process::Command;
use stealscope_readers::cpulist::format as cpulist;

/// The virsh arguments that set a vCPU's (or the emulator's) CPUs.
pub fn pin_args(domain: &str, vcpu: Option<u32>, cpus: &[u32]) -> Vec<String> {
    let list = cpulist(cpus);
    match vcpu {
        Some(i) => vec![
            "vcpupin".into(),
            domain.into(),
            i.to_string(),
            list,
            "--live".into(),
            "--config".into(),
        ],
        None => vec![
            "emulatorpin".into(),
            domain.into(),
            list,
            "--live".into(),
            "--config".into(),
        ],
    }
}

/// cpu_shares is in cgroup v1 units even on v2 hosts (libvirt converts).
pub fn shares_args(domain: &str, shares: u64) -> Vec<String> {
    vec![
        "schedinfo".into(),
        domain.into(),
        "--live".into(),
        "--config".into(),
        format!("cpu_shares={shares}"),
    ]
}

pub fn numatune_args(domain: &str, node: u32) -> Vec<String> {
    vec![
        "numatune".into(),
        domain.into(),
        "--nodeset".into(),
        node.to_string(),
        "--live".into(),
        "--config".into(),
    ]
}

pub fn run(args: &[String]) -> Result<(), ApplyError> {
    let out = Command::new("virsh").args(args).output().map_err(|e| {
        ApplyError::Other(format!(
            "virsh {}: {e} (is libvirt-clients installed?)",
            args.join(" ")
        ))
    })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr)
        .trim()
        .replace('\n', " ");
    if err.contains("Domain not found") || err.contains("domain is not running") {
        return Err(ApplyError::Gone {
            what: format!("domain {}", args.get(1).map_or("?", |s| s.as_str())),
        });
    }
    Err(ApplyError::Other(format!(
        "virsh {}: {err}",
        args.join(" ")
    )))
}
