//! What kind of thing a culprit is, once the model has named it. The JSON
//! and metric strings are the ones every version has written.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A culprit's kind. Variants are declared in the order of their strings,
/// so sorting by kind sorts as the strings did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// Kernel threads, by class (kworker, ksoftirqd, migration, ...).
    #[serde(rename = "host-kthread")]
    HostKthread,
    /// A host process, by its process's comm, threads folded in.
    #[serde(rename = "host-process")]
    HostProcess,
    /// Hard and soft interrupt time.
    #[serde(rename = "irq")]
    Irq,
    /// Everything past the culprits shown (series and recordings).
    #[serde(rename = "other")]
    Other,
    /// stealscope's own threads: its cost, never listed as a culprit.
    #[serde(rename = "self")]
    Own,
    /// Named `idle` (the CPU idled while the vCPU was queued) or
    /// `untraced` (no record covers the time).
    #[serde(rename = "unknown")]
    Unknown,
    /// A VM's vCPU threads, named by the VM.
    #[serde(rename = "vcpu")]
    Vcpu,
    /// A VM's other (emulator, I/O) threads, named by the VM.
    #[serde(rename = "vmm")]
    Vmm,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::HostKthread,
        Kind::HostProcess,
        Kind::Irq,
        Kind::Other,
        Kind::Own,
        Kind::Unknown,
        Kind::Vcpu,
        Kind::Vmm,
    ];

    /// The string JSON, metrics and recordings carry.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::HostKthread => "host-kthread",
            Kind::HostProcess => "host-process",
            Kind::Irq => "irq",
            Kind::Other => "other",
            Kind::Own => "self",
            Kind::Unknown => "unknown",
            Kind::Vcpu => "vcpu",
            Kind::Vmm => "vmm",
        }
    }

    /// The kind a string names; None for one this build does not know.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// A thread on the host outside any VM (a process or kernel threads).
    pub fn is_host(self) -> bool {
        matches!(self, Kind::HostProcess | Kind::HostKthread)
    }

    /// A VM's own threads (its vCPUs or its VMM).
    pub fn is_vm(self) -> bool {
        matches!(self, Kind::Vcpu | Kind::Vmm)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_sort_and_round_trip_as_before() {
        let mut by_str: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        by_str.sort();
        let by_kind: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(by_str, by_kind);
        for k in Kind::ALL {
            let json = format!("\"{k}\"");
            assert_eq!(serde_json::to_string(&k).unwrap(), json);
            assert_eq!(serde_json::from_str::<Kind>(&json).unwrap(), k);
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("thread"), None);
    }
}
