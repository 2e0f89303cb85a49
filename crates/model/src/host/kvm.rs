//! KVM counters of one VM from whichever source the host offers, in one
//! shape: the binary stats files (stats fds the VMM holds) or QEMU's QMP
//! `query-stats` export of the same statistics. KVM debugfs keeps its own
//! reader (readers::kvm_debugfs); `deltas` joins all of them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use stealscope_readers::kvm_debugfs::{KvmVm, STATS};
use stealscope_readers::kvm_stats::StatsFile;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KvmStatsSource {
    /// /sys/kernel/debug/kvm/<pid>-<fd>.
    Debugfs,
    /// KVM_GET_STATS_FD files (a stats fd the VMM holds).
    StatsFd,
    /// QEMU's QMP query-stats (QEMU reads its own stats fds).
    QmpQueryStats,
}

impl KvmStatsSource {
    pub fn as_str(self) -> &'static str {
        match self {
            KvmStatsSource::Debugfs => "kvm debugfs",
            KvmStatsSource::StatsFd => "binary stats fd",
            KvmStatsSource::QmpQueryStats => "QMP query-stats",
        }
    }
}

/// Cumulative counters of one VM at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmCounters {
    pub source: KvmStatsSource,
    /// VM-wide statistics.
    pub vm: BTreeMap<String, u64>,
    /// vCPU statistics by vCPU index.
    pub vcpus: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl KvmCounters {
    pub fn from_files(files: &[StatsFile]) -> Option<KvmCounters> {
        let mut c = KvmCounters {
            source: KvmStatsSource::StatsFd,
            vm: BTreeMap::new(),
            vcpus: BTreeMap::new(),
        };
        for f in files {
            match f.vcpu() {
                Some(i) => c.vcpus.entry(i).or_default().extend(f.counters()),
                None => c.vm.extend(f.counters()),
            }
        }
        (!files.is_empty()).then_some(c)
    }

    /// From `query-stats` replies for target "vm" and "vcpu" (QEMU's
    /// qapi/stats.json: [{"provider","qom-path"?,"stats":[{"name","value"}]}]);
    /// `qom_index` maps a vCPU's qom-path to its index (query-cpus-fast).
    pub fn from_query_stats(
        vm: Option<&Value>,
        vcpu: Option<&Value>,
        qom_index: &BTreeMap<String, u32>,
    ) -> Option<KvmCounters> {
        fn counters(entry: &Value) -> BTreeMap<String, u64> {
            // Histograms are lists and booleans are instant values: only
            // integer statistics are counters.
            entry["stats"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| Some((s["name"].as_str()?.to_string(), s["value"].as_u64()?)))
                .collect()
        }
        let kvm = |v: Option<&Value>| -> Vec<Value> {
            v.and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|e| e["provider"] == "kvm")
                .cloned()
                .collect()
        };
        let (vms, vcpus) = (kvm(vm), kvm(vcpu));
        if vms.is_empty() && vcpus.is_empty() {
            return None;
        }
        let mut c = KvmCounters {
            source: KvmStatsSource::QmpQueryStats,
            vm: vms.iter().flat_map(counters).collect(),
            vcpus: BTreeMap::new(),
        };
        for e in &vcpus {
            if let Some(i) = e["qom-path"].as_str().and_then(|p| qom_index.get(p)) {
                c.vcpus.insert(*i, counters(e));
            }
        }
        Some(c)
    }

    /// VM statistics plus vCPU statistics summed over vCPUs (what debugfs shows).
    pub fn totals(&self) -> BTreeMap<String, u64> {
        let mut t = self.vm.clone();
        for v in self.vcpus.values() {
            for (k, n) in v {
                *t.entry(k.clone()).or_default() += n;
            }
        }
        t
    }
}

/// Change of the rule-relevant counters (kvm_debugfs::STATS) of one VM over
/// the interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvmDelta {
    pub pid: u32,
    pub source: &'static str,
    pub counters: BTreeMap<String, u64>,
}

fn delta_of(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    STATS
        .iter()
        .filter_map(|n| {
            let (x, y) = (a.get(*n)?, b.get(*n)?);
            // A counter going back means a new VM fd under the same pid.
            Some((n.to_string(), y.saturating_sub(*x)))
        })
        .collect()
}

/// Deltas per VM: KVM debugfs for every VM it lists (also VMMs we do not
/// recognise), then binary statistics for VMs debugfs does not cover.
pub fn deltas(
    debugfs: (Option<&[KvmVm]>, Option<&[KvmVm]>),
    binary: (&BTreeMap<u32, KvmCounters>, &BTreeMap<u32, KvmCounters>),
) -> Vec<KvmDelta> {
    let mut out = Vec::new();
    if let (Some(a), Some(b)) = debugfs {
        for vm in b {
            if let Some(x) = a.iter().find(|x| x.pid == vm.pid && x.fd == vm.fd) {
                out.push(KvmDelta {
                    pid: vm.pid,
                    source: KvmStatsSource::Debugfs.as_str(),
                    counters: delta_of(&x.stats, &vm.stats),
                });
            }
        }
    }
    for (pid, c1) in binary.1 {
        if out.iter().any(|d| d.pid == *pid) {
            continue;
        }
        if let Some(c0) = binary.0.get(pid).filter(|c0| c0.source == c1.source) {
            out.push(KvmDelta {
                pid: *pid,
                source: c1.source.as_str(),
                counters: delta_of(&c0.totals(), &c1.totals()),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn query_stats_replies_as_qemu_sends_them() {
        // Shapes from QEMU 10.0 on a KVM VM (this machine, kvm_pvm).
        let vm = json!([{"provider": "kvm", "stats": [
            {"name": "remote_tlb_flush", "value": 3}, {"name": "mmu_cache_miss", "value": 20}]}]);
        let vcpu = json!([
            {"provider": "kvm", "qom-path": "/machine/unattached/device[0]", "stats": [
                {"name": "exits", "value": 7806}, {"name": "halt_exits", "value": 366},
                {"name": "guest_mode", "value": false},
                {"name": "halt_wait_hist", "value": [0, 222, 1]}]},
            {"provider": "kvm", "qom-path": "/machine/unattached/device[2]", "stats": [
                {"name": "exits", "value": 1}, {"name": "halt_exits", "value": 1}]}]);
        let qom: BTreeMap<String, u32> = [
            ("/machine/unattached/device[0]".to_string(), 0),
            ("/machine/unattached/device[2]".to_string(), 1),
        ]
        .into();
        let c = KvmCounters::from_query_stats(Some(&vm), Some(&vcpu), &qom).unwrap();
        assert_eq!(c.vm["remote_tlb_flush"], 3);
        assert_eq!(c.vcpus[&0]["exits"], 7806);
        assert!(!c.vcpus[&0].contains_key("guest_mode"));
        assert!(!c.vcpus[&0].contains_key("halt_wait_hist"));
        let t = c.totals();
        assert_eq!((t["exits"], t["halt_exits"]), (7807, 367));
        assert!(KvmCounters::from_query_stats(Some(&json!([])), None, &qom).is_none());
    }

    #[test]
    fn debugfs_first_then_binary_and_counter_resets() {
        let dbg = |exits: u64| {
            vec![KvmVm {
                pid: 7,
                fd: 11,
                stats: [("exits".to_string(), exits)].into(),
                vcpu_tids: BTreeMap::new(),
            }]
        };
        let bin = |pid: u32, exits: u64| -> BTreeMap<u32, KvmCounters> {
            [(
                pid,
                KvmCounters {
                    source: KvmStatsSource::QmpQueryStats,
                    vm: BTreeMap::new(),
                    vcpus: [(0, [("exits".to_string(), exits)].into())].into(),
                },
            )]
            .into()
        };
        let (a, b) = (dbg(100), dbg(150));
        let (x, y) = (bin(7, 1), bin(7, 9));
        let d = deltas((Some(&a), Some(&b)), (&x, &y));
        assert_eq!(d.len(), 1, "debugfs covers pid 7");
        assert_eq!((d[0].source, d[0].counters["exits"]), ("kvm debugfs", 50));
        let (x, y) = (bin(8, 10), bin(8, 4));
        let d = deltas((None, None), (&x, &y));
        assert_eq!(d[0].counters["exits"], 0, "a reset is not a negative delta");
    }
}
