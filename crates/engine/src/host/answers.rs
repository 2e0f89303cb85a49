//! What only a live host can answer, asked while capturing and written into
//! the snapshot under /stealscope/ (paths and shapes in
//! stealscope_model::host::stored): QEMU's QMP (vCPU threads, accelerator,
//! the KVM statistics it exports), KVM stats fds a VMM holds, and the
//! kvm:kvm_exit sample.

use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;
use stealscope_model::host::observation::VmObs;
use stealscope_model::host::stored::{
    QmpAttempt, QmpRecord, AFFINITY, EXIT_SAMPLE, KVM_STATS_DIR, NOTES, OWN_PID, QMP_DIR,
};
use stealscope_model::host::VmKind;
use stealscope_readers::kvm_exits::{self, ExitSample};
use stealscope_readers::kvm_stats;
use stealscope_readers::qmp::{sockets_from_cmdline, Qmp, QmpSocket};
use stealscope_readers::MemFs;

#[derive(Debug, Clone)]
pub struct HostLiveOptions {
    /// QMP sockets the user named: (VM name, socket path).
    pub qmp: Vec<(String, String)>,
    /// Also use QMP sockets declared on QEMU command lines.
    pub qmp_discover: bool,
    /// Per QMP step (connect, greeting, each command).
    pub qmp_timeout: Duration,
    /// Length of the kvm:kvm_exit sample; zero disables it.
    pub exit_sample: Duration,
    /// Run the scheduler-event collector for attribution (host::sched_hook).
    pub attribution: bool,
}

impl Default for HostLiveOptions {
    fn default() -> Self {
        HostLiveOptions {
            qmp: Vec::new(),
            qmp_discover: true,
            qmp_timeout: Duration::from_millis(500),
            exit_sample: Duration::from_secs(1),
            // Off unless asked (host, doctor): a periodic caller would start
            // a collector every interval.
            attribution: false,
        }
    }
}

fn query(vm: &VmObs, opts: &HostLiveOptions) -> Option<QmpRecord> {
    let mut rec = QmpRecord::default();
    let mut candidates: Vec<QmpSocket> = opts
        .qmp
        .iter()
        .filter(|(name, _)| *name == vm.name)
        .map(|(_, path)| QmpSocket {
            path: path.clone(),
            origin: "--qmp".into(),
        })
        .collect();
    if opts.qmp_discover {
        let (found, notes) = sockets_from_cmdline(&vm.cmdline);
        if vm.manager.as_deref() == Some("libvirt") && !found.is_empty() {
            // libvirt holds its monitor's only connection: we would wait for nothing.
            rec.notes.push(
                "the QMP monitor belongs to libvirt: not used (give --qmp for another one)".into(),
            );
        } else {
            candidates.extend(found);
        }
        rec.notes.extend(notes);
    }
    if candidates.is_empty() && rec.notes.is_empty() {
        return None;
    }
    for s in candidates {
        match Qmp::connect(&s.path, opts.qmp_timeout) {
            Ok(mut q) => {
                rec.socket = Some(s.path);
                rec.origin = Some(s.origin);
                rec.version = q.version.clone();
                let mut ask = |rec: &mut QmpRecord, key: &str, cmd: &str, args: Option<Value>| {
                    match q.execute(cmd, args) {
                        Ok(v) => rec.replies.insert(key.to_string(), v).map(|_| ()),
                        Err(e) => rec
                            .errors
                            .insert(key.to_string(), e.to_string())
                            .map(|_| ()),
                    };
                };
                ask(&mut rec, "query-cpus-fast", "query-cpus-fast", None);
                ask(&mut rec, "query-kvm", "query-kvm", None);
                if rec.kvm_enabled() == Some(true) {
                    for target in ["vm", "vcpu"] {
                        let args = json!({"target": target, "providers": [{"provider": "kvm"}]});
                        ask(
                            &mut rec,
                            &format!("query-stats {target}"),
                            "query-stats",
                            Some(args),
                        );
                    }
                }
                break;
            }
            Err(e) => rec.failed.push(QmpAttempt {
                socket: s.path,
                origin: s.origin,
                error: e.to_string(),
            }),
        }
    }
    Some(rec)
}

fn json_bytes<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(v).unwrap_or_default()
}

/// Stores in the end side where the largest non-VM processes may run
/// (their Cpus_allowed_list), so that a fix can say "pinned to CPU 0":
/// only for the few host_work lists, not for every process.
pub fn add_affinity(
    side: &mut MemFs,
    root: &std::path::Path,
    procs0: &[stealscope_model::host::observation::HostProc],
    end: &stealscope_model::host::HostObservation,
    wall_s: f64,
) {
    let start = stealscope_model::host::HostObservation {
        procs: procs0.to_vec(),
        ..Default::default()
    };
    let work = stealscope_model::host::host_work::host_work(&start, end, wall_s);
    let mut out: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for pid in work.top.iter().filter_map(|w| w.culprit.pid) {
        let path = format!("/proc/{pid}/status");
        let Ok(text) = std::fs::read_to_string(root.join(&path[1..])) else {
            continue; // it ended since
        };
        if let Ok(Some(c)) =
            stealscope_readers::process::parse_status(&text, &path).map(|s| s.cpus_allowed)
        {
            out.insert(pid, c);
        }
    }
    if !out.is_empty() {
        side.insert(AFFINITY, json_bytes(&out));
    }
}

/// Asks every VM's QMP and KVM stats fds and stores the answers in `side`.
pub fn add_side(side: &mut MemFs, vms: &[VmObs], opts: &HostLiveOptions) {
    // Its own threads are its cost, not a culprit: the model leaves them out.
    side.insert(OWN_PID, json_bytes(&std::process::id()));
    let unknown: Vec<String> = opts
        .qmp
        .iter()
        .filter(|(name, _)| !vms.iter().any(|v| v.name == *name))
        .map(|(name, path)| format!("--qmp {name}={path}: no VM named {name} was found"))
        .collect();
    if !unknown.is_empty() {
        side.insert(NOTES, json_bytes(&unknown));
    }
    for vm in vms {
        let rec = query(vm, opts);
        if let Some(r) = &rec {
            side.insert(&format!("{QMP_DIR}/{}.json", vm.pid), json_bytes(r));
        }
        let tcg = vm.kind == VmKind::QemuTcg
            || rec.as_ref().and_then(QmpRecord::kvm_enabled) == Some(false);
        let dir = format!("{KVM_STATS_DIR}/{}", vm.pid);
        if tcg {
            let why = ["runs on TCG (software emulation): KVM keeps no statistics for it"];
            side.insert(&format!("{dir}/problems.json"), json_bytes(&why));
            continue;
        }
        let got = kvm_stats::from_process(vm.pid);
        for (fd, bytes) in &got.files {
            side.insert(&format!("{dir}/{fd}.bin"), bytes);
        }
        if !got.problems.is_empty() {
            side.insert(&format!("{dir}/problems.json"), json_bytes(&got.problems));
        }
    }
}

/// Stores the result of the exit sample (or why there is none).
pub fn add_exit_sample(side: &mut MemFs, sample: &ExitSample) {
    side.insert(EXIT_SAMPLE, json_bytes(sample));
}

pub fn exit_sample_failed() -> ExitSample {
    ExitSample::NotAvailable {
        reason: "the sampling thread failed".into(),
    }
}

/// Takes the kvm:kvm_exit sample (in the calling thread).
pub fn exit_sample(len: Duration) -> ExitSample {
    if len.is_zero() {
        return ExitSample::NotAvailable {
            reason: "not taken (--exit-sample 0)".into(),
        };
    }
    kvm_exits::sample(len, true)
}
