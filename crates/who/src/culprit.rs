//! A culprit as the model names it, and the one row that charges wait to
//! it. Every report, series and recording of "who stole it" uses these.

use crate::Kind;
use serde::{Deserialize, Serialize};

/// What ran while a vCPU waited, named: a VM's vCPUs or VMM threads (by
/// the VM), a kernel-thread class, a host process, interrupts, or unknown
/// (`idle`, `untraced`). Fields it does not have are left out of JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Culprit {
    pub kind: Kind,
    pub name: String,
    /// The VM, for its vCPUs and VMM threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The process (a host process, stealscope, a VM's VMM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Culprit {
    /// A culprit named only by kind and name (no VM, no pid).
    pub fn new(kind: Kind, name: impl Into<String>) -> Culprit {
        Culprit {
            kind,
            name: name.into(),
            vm: None,
            pid: None,
        }
    }

    /// Interrupt time.
    pub fn irq() -> Culprit {
        Culprit::new(Kind::Irq, "irq")
    }

    /// The CPU ran its idle task while the vCPU was queued.
    pub fn idle() -> Culprit {
        Culprit::new(Kind::Unknown, "idle")
    }

    /// Queued time no record covers.
    pub fn untraced() -> Culprit {
        Culprit::new(Kind::Unknown, "untraced")
    }

    /// Everything past the culprits shown.
    pub fn other() -> Culprit {
        Culprit::new(Kind::Other, "other")
    }

    /// Kind and name only: a series label (the pid left out to bound
    /// cardinality).
    pub fn label(&self) -> Culprit {
        Culprit::new(self.kind, self.name.clone())
    }
}

/// Wait charged to one culprit: seconds, and its share of the whole it is
/// part of (a vCPU's wait, a VM's, the host's: the holder says which).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    #[serde(flatten)]
    pub culprit: Culprit,
    pub seconds: f64,
    pub share: f64,
}

impl Charge {
    /// `ns` of a whole of `total_ns`.
    pub fn of(culprit: Culprit, ns: u64, total_ns: u64) -> Charge {
        Charge {
            culprit,
            seconds: ns as f64 / 1e9,
            share: ns as f64 / total_ns.max(1) as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_flat_json_without_absent_fields() {
        let c = Charge {
            culprit: Culprit {
                pid: Some(7),
                ..Culprit::new(Kind::HostProcess, "burn")
            },
            seconds: 1.5,
            share: 0.5,
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"host-process","name":"burn","pid":7,"seconds":1.5,"share":0.5}"#
        );
        assert_eq!(serde_json::from_str::<Charge>(&json).unwrap(), c);
    }
}
