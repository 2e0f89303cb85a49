//! What the live capture stores in a snapshot side under /stealscope/ (a
//! prefix no kernel file has): where each answer lives and the QMP record's
//! shape. The capture that asks a live host is the engine's
//! (stealscope_engine::host::answers); the model only reads these back, so
//! that the report of a saved snapshot is the report that was printed live.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// <pid>.json: a [`QmpRecord`].
pub const QMP_DIR: &str = "/stealscope/qmp";
/// <pid>/<fd>.bin: raw stats files; <pid>/problems.json: why there are none.
pub const KVM_STATS_DIR: &str = "/stealscope/kvm-stats";
/// t1 only: an [`ExitSample`].
pub const EXIT_SAMPLE: &str = "/stealscope/kvm-exit-sample.json";
/// The capturing stealscope's own pid (a JSON number): its threads are
/// left out of culprits and host work, and shown once as its own cost.
pub const OWN_PID: &str = "/stealscope/own-pid.json";
/// t1 only: the CPUs each of the largest non-VM processes may run on
/// (pid -> Cpus_allowed_list), so that a fix can say a loop is pinned.
pub const AFFINITY: &str = "/stealscope/affinity.json";
/// Each side: when each process's threads were read (pid -> CLOCK_MONOTONIC
/// ns), so a saved snapshot times each process as the live report did.
pub const READ_TIMES: &str = "/stealscope/read-times.json";
/// Notes of the live capture itself (a --qmp name that matches no VM).
pub const NOTES: &str = "/stealscope/notes.json";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QmpAttempt {
    pub socket: String,
    pub origin: String,
    pub error: String,
}

/// What one VM's QMP said (or why it said nothing), as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QmpRecord {
    /// The socket that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Sockets that did not answer.
    #[serde(default)]
    pub failed: Vec<QmpAttempt>,
    /// Command ("query-stats vcpu" for query-stats with target vcpu) -> `return`.
    #[serde(default)]
    pub replies: BTreeMap<String, Value>,
    /// Command -> error, for commands QEMU refused.
    #[serde(default)]
    pub errors: BTreeMap<String, String>,
    /// Monitors on the command line that cannot be used, and why.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl QmpRecord {
    /// vCPU thread id -> vCPU index, from query-cpus-fast.
    pub fn vcpu_tids(&self) -> BTreeMap<u32, u32> {
        self.cpus()
            .filter_map(|c| {
                Some((
                    c["thread-id"].as_u64()? as u32,
                    c["cpu-index"].as_u64()? as u32,
                ))
            })
            .collect()
    }

    /// qom-path -> vCPU index, to place query-stats vCPU entries.
    pub fn qom_index(&self) -> BTreeMap<String, u32> {
        self.cpus()
            .filter_map(|c| {
                Some((
                    c["qom-path"].as_str()?.to_string(),
                    c["cpu-index"].as_u64()? as u32,
                ))
            })
            .collect()
    }

    fn cpus(&self) -> impl Iterator<Item = &Value> {
        self.replies
            .get("query-cpus-fast")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    }

    /// query-kvm "enabled": the VM runs on KVM (false: TCG).
    pub fn kvm_enabled(&self) -> Option<bool> {
        self.replies.get("query-kvm")?["enabled"].as_bool()
    }
}
