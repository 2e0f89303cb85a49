//! libvirt-managed VMs: their knobs belong to libvirt, so changes go
//! through `virsh` with `--live`, plus `--config` when the domain is
//! persistent (the running domain and its XML agree, and a restart keeps
//! the placement; a transient domain has no persistent XML and refuses
//! `--config`). The connection is virsh's default (`LIBVIRT_DEFAULT_URI`,
//! else qemu:///system for root).

use crate::error::ApplyError;
use std::process::Command;
use stealscope_readers::cpulist::format as cpulist;

/// `--live`, and `--config` for a domain with a persistent definition.
fn scope(persistent: bool) -> impl Iterator<Item = String> {
    ["--live", "--config"]
        .into_iter()
        .take(if persistent { 2 } else { 1 })
        .map(String::from)
}

/// The virsh arguments that set a vCPU's (or the emulator's) CPUs.
pub fn pin_args(domain: &str, vcpu: Option<u32>, cpus: &[u32], persistent: bool) -> Vec<String> {
    let mut a = match vcpu {
        Some(i) => vec!["vcpupin".into(), domain.into(), i.to_string()],
        None => vec!["emulatorpin".into(), domain.into()],
    };
    a.push(cpulist(cpus));
    a.extend(scope(persistent));
    a
}

/// libvirt writes cpu_shares unchanged into the group's weight file:
/// cpu.shares on cgroup v1 ([2, 262144]), cpu.weight on v2 ([1, 10000]).
pub fn shares_args(domain: &str, shares: u64, persistent: bool) -> Vec<String> {
    let mut a = vec!["schedinfo".into(), domain.into()];
    a.extend(scope(persistent));
    a.push(format!("cpu_shares={shares}"));
    a
}

pub fn numatune_args(domain: &str, node: u32, persistent: bool) -> Vec<String> {
    let mut a = vec![
        "numatune".into(),
        domain.into(),
        "--nodeset".into(),
        node.to_string(),
    ];
    a.extend(scope(persistent));
    a
}

/// Whether virsh's error says the domain is gone (virsh 9 prints only
/// "failed to get domain 'X'" for an unknown name).
fn domain_gone(stderr: &str) -> bool {
    [
        "failed to get domain",
        "Domain not found",
        "domain is not running",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// Runs virsh; its stdout on success.
fn virsh(args: &[String]) -> Result<String, ApplyError> {
    let out = Command::new("virsh").args(args).output().map_err(|e| {
        ApplyError::Other(format!(
            "virsh {}: {e} (is libvirt-clients installed?)",
            args.join(" ")
        ))
    })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let err = err.join("; ");
    if domain_gone(&err) {
        return Err(ApplyError::Gone {
            what: format!("domain {}", args.get(1).map_or("?", |s| s.as_str())),
        });
    }
    Err(ApplyError::Other(format!(
        "virsh {}: {err}",
        args.join(" ")
    )))
}

/// `Persistent:` of `virsh dominfo` output.
pub fn parse_persistent(dominfo: &str) -> Option<bool> {
    dominfo
        .lines()
        .find_map(|l| match l.strip_prefix("Persistent:")?.trim() {
            "yes" => Some(true),
            "no" => Some(false),
            _ => None,
        })
}

/// Whether `domain` has a persistent definition.
pub fn persistent(domain: &str) -> Result<bool, ApplyError> {
    let args = vec!["dominfo".to_string(), domain.to_string()];
    parse_persistent(&virsh(&args)?).ok_or_else(|| {
        ApplyError::Other(format!(
            "virsh dominfo {domain}: no `Persistent: yes|no` line"
        ))
    })
}

/// Pins a vCPU (or, `vcpu` None, the emulator threads) of `domain`.
pub fn pin(domain: &str, vcpu: Option<u32>, cpus: &[u32]) -> Result<(), ApplyError> {
    let p = persistent(domain)?;
    virsh(&pin_args(domain, vcpu, cpus, p)).map(drop)
}

/// Sets the domain's cpu_shares (its machine group's weight).
pub fn set_shares(domain: &str, shares: u64) -> Result<(), ApplyError> {
    let p = persistent(domain)?;
    virsh(&shares_args(domain, shares, p)).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_live_and_config_only_when_persistent() {
        assert_eq!(
            pin_args("web", Some(1), &[2, 3, 5], true).join(" "),
            "vcpupin web 1 2-3,5 --live --config"
        );
        assert_eq!(
            pin_args("web", None, &[0], false).join(" "),
            "emulatorpin web 0 --live"
        );
        assert_eq!(
            shares_args("web", 2048, false).join(" "),
            "schedinfo web --live cpu_shares=2048"
        );
        assert_eq!(
            numatune_args("web", 1, true).join(" "),
            "numatune web --nodeset 1 --live --config"
        );
    }

    #[test]
    fn dominfo_and_errors() {
        // virsh 9.0's dominfo of a transient domain (abridged).
        let info = "Id:             1\nName:           lvA\nState:          running\n\
                    Persistent:     no\nAutostart:      disable\n";
        assert_eq!(parse_persistent(info), Some(false));
        assert_eq!(parse_persistent("Persistent:     yes\n"), Some(true));
        assert_eq!(parse_persistent("Name: x\n"), None);
        assert!(domain_gone("error: failed to get domain 'lvA'"));
        assert!(!domain_gone(
            "error: failed to connect to the hypervisor; error: Failed to connect socket"
        ));
    }
}
