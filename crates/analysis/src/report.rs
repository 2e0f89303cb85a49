//! The doctor report (docs/contract.md): summary, ranked findings, notes.

use crate::finding::{evidence, Finding};
use crate::roles::guest_evidence;
use crate::rules::run_guest;
use serde::{Serialize, Serializer};
use stealscope_findings::evidence::in_key_order;
use stealscope_findings::units::{pct, round_opt};
use stealscope_model::host::derived::ExitsByVm;
use stealscope_model::host::VmKind;
use stealscope_model::MachineModel;
use stealscope_probes::{preempt::PreemptReport, wakeup::WakeupReport};
use stealscope_readers::kvm_debugfs::KvmVm;

pub const SCHEMA: &str = "stealscope/doctor/1";

#[derive(Debug, Clone, Serialize)]
pub struct CpuSummary {
    pub cpu: u32,
    pub busy_pct: Option<f64>,
    pub idle_pct: Option<f64>,
    pub steal_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Mean over CPUs, % of wall time; null when no CPU was online throughout.
    pub steal_pct: Option<f64>,
    pub cpus: Vec<CpuSummary>,
    /// Share of steal that hit busy / idle windows; null when no steal.
    pub steal_busy_share: Option<f64>,
    pub steal_idle_share: Option<f64>,
    pub windows: usize,
    pub wall_s: Option<f64>,
}

/// The host view: VMs, per-vCPU host steal, the hypervisor split.
#[derive(Debug, Clone, Serialize)]
pub struct HostSection {
    pub vms: Vec<stealscope_model::host::VmSteal>,
    pub hypervisor: Hypervisor,
    /// KVM statistics from debugfs, or why they are missing.
    #[serde(serialize_with = "in_key_order")]
    pub kvm_stats: KvmStats,
    pub numa_nodes: usize,
    /// KVM binary statistics (stats fds or QMP query-stats) per VM, or why not.
    pub kvm_binary_stats: SourceStatus,
    /// The kvm:kvm_exit sample: exits by reason per VM, or why there is none.
    pub kvm_exit_sample: SourceStatus,
    /// attribution, culprits, host_work.
    #[serde(flatten)]
    pub who: WhoStole,
}

/// Who took the vCPUs' time (SPEC "Attribution"), at the top level of the
/// host section and of `host --json`.
#[derive(Debug, Clone, Serialize)]
pub struct WhoStole {
    /// Which route attributed vCPU wait to culprits, or why none did.
    pub attribution: stealscope_model::host::attribution::AttributionStatus,
    /// Culprits of all vCPU wait on the host, most first.
    pub culprits: Vec<stealscope_model::host::attribution::CulpritShare>,
    /// The host's runnable work that is not a VM's.
    pub host_work: stealscope_model::host::host_work::HostWork,
    /// Runnable threads still queued at the end of the capture, not run
    /// for a quarter second or more, longest first: schedstat's interval
    /// deltas cannot show them (their run_delay moves only when they run).
    /// None when no starvation scanner ran (recordings, older snapshots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_waits: Option<Vec<OpenWait>>,
}

/// An open wait: a runnable thread that has not run since `since_s`.
#[derive(Debug, Clone, Serialize)]
pub struct OpenWait {
    #[serde(flatten)]
    pub wait: stealscope_model::host::starve::StoredWait,
    /// The VM whose thread it is, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
}

/// The scanner's open waits at the end of the capture, with their VMs.
fn open_waits(m: &MachineModel) -> Option<Vec<OpenWait>> {
    let s = m.t1.host.starved.as_ref()?;
    let vm = |pid: u32| {
        m.t1.host
            .vms
            .iter()
            .find(|v| v.pid == pid)
            .map(|v| v.name.clone())
    };
    Some(
        s.waits
            .iter()
            .filter(|w| w.open)
            .map(|w| OpenWait {
                wait: w.clone(),
                vm: vm(w.pid),
            })
            .collect(),
    )
}

/// KVM debugfs statistics per VM, or one sentence saying why there are none
/// (JSON: the list, or the sentence as a string).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum KvmStats {
    Vms(Vec<KvmVm>),
    Missing(String),
}

impl KvmStats {
    /// The sentence, when the statistics are missing.
    pub fn missing(&self) -> Option<&str> {
        match self {
            KvmStats::Missing(s) => Some(s),
            KvmStats::Vms(_) => None,
        }
    }
}

/// One VM whose KVM binary statistics were read, and from where.
#[derive(Debug, Clone, Serialize)]
pub struct BinaryStatsVm {
    pub name: String,
    pub pid: u32,
    pub source: &'static str,
    pub vcpus: usize,
}

/// The details behind a [`SourceStatus`].
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum SourceData {
    Binary(Vec<BinaryStatsVm>),
    Exits(ExitsByVm),
}

/// A source of KVM statistics: whether it gave anything, one line saying
/// what (the text report prints it as is), and the details.
#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    /// "available", "partial", "not available", "no exits" or "not taken".
    pub status: &'static str,
    pub detail: String,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "in_key_order"
    )]
    pub data: Option<SourceData>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hypervisor {
    pub vcpu_wait_cpu_s: Option<f64>,
    pub host_idle_cpu_s: Option<f64>,
    pub busy_steal_share: Option<f64>,
    pub idle_steal_share: Option<f64>,
}

pub fn host_section(m: &MachineModel) -> Option<HostSection> {
    let h = &m.host;
    if m.t1.host.vms.is_empty() {
        return None;
    }
    let share = |v: Option<f64>| round_opt(v, 3);
    let kvm_stats = match &m.t1.host.kvm {
        Some(vms) => KvmStats::Vms(vms.clone()),
        None => KvmStats::Missing("not available: KVM debugfs (/sys/kernel/debug/kvm) is not mounted or KVM is not loaded; exit and halt-poll statistics not shown".into()),
    };
    Some(HostSection {
        kvm_binary_stats: kvm_binary_status(m),
        kvm_exit_sample: exit_sample_status(m),
        vms: h.vms.clone(),
        hypervisor: Hypervisor {
            vcpu_wait_cpu_s: round_opt(Some(h.split.vcpu_wait_s), 3),
            host_idle_cpu_s: round_opt(Some(h.split.host_idle_s), 3),
            busy_steal_share: share(h.split.busy_share()),
            idle_steal_share: share(h.split.idle_share()),
        },
        kvm_stats,
        numa_nodes: m.t1.host.nodes.len(),
        who: WhoStole {
            attribution: h.attribution.clone(),
            culprits: h.culprits.clone(),
            host_work: h.host_work.clone(),
            open_waits: open_waits(m),
        },
    })
}

fn kvm_binary_status(m: &MachineModel) -> SourceStatus {
    let h = &m.t1.host;
    let mut got = Vec::new();
    // (what happened, which VMs), in the order first seen.
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    // The VMs of the table: present for the whole interval.
    for vm in &m.host.vms {
        let who = format!("{} (pid {})", vm.name, vm.pid);
        let outcome = match h.kvm_binary.get(&vm.pid) {
            Some(c) => {
                got.push(BinaryStatsVm {
                    name: vm.name.clone(),
                    pid: vm.pid,
                    source: c.source.as_str(),
                    vcpus: c.vcpus.len(),
                });
                c.source.as_str().to_string()
            }
            None => format!(
                "not available for {{}}: {}",
                h.kvm_binary_problems
                    .get(&vm.pid)
                    .map(|p| p.join("; "))
                    .unwrap_or_else(
                        || "not recorded (no live capture of it in this snapshot)".into()
                    )
            ),
        };
        match groups.iter_mut().find(|(o, _)| *o == outcome) {
            Some((_, v)) => v.push(who),
            None => groups.push((outcome, vec![who])),
        }
    }
    let detail: Vec<String> = groups
        .iter()
        .map(|(o, vms)| match o.contains("{}") {
            true => o.replace("{}", &vms.join(", ")),
            false => format!("{o}: {}", vms.join(", ")),
        })
        .collect();
    let status = match got.len() {
        0 => "not available",
        n if n == m.host.vms.len() => "available",
        _ => "partial",
    };
    SourceStatus {
        status,
        detail: detail.join("; "),
        data: Some(SourceData::Binary(got)),
    }
}

fn exit_sample_status(m: &MachineModel) -> SourceStatus {
    use stealscope_readers::kvm_exits::ExitSample;
    let Some(sample) = &m.t1.host.exit_sample else {
        return SourceStatus {
            status: "not taken",
            detail: "not taken (this snapshot has no kvm:kvm_exit sample)".into(),
            data: None,
        };
    };
    let c = match sample {
        ExitSample::Sampled(c) => c,
        ExitSample::NotAvailable { reason } => {
            return SourceStatus {
                status: "not available",
                detail: format!("not available: {reason}"),
                data: None,
            }
        }
    };
    let data = m.host.exits.clone().map(SourceData::Exits);
    let lost = if c.lost > 0 {
        format!(", {} events lost", c.lost)
    } else {
        String::new()
    };
    if c.events == 0 {
        // KVM's own counters say whether vCPUs exited meanwhile.
        let counted: u64 = m
            .host
            .kvm
            .iter()
            .filter_map(|d| d.counters.get("exits"))
            .sum();
        let kvm_vms =
            m.t1.host
                .vms
                .iter()
                .filter(|v| matches!(v.kind, VmKind::QemuKvm | VmKind::Firecracker))
                .count();
        let why = if counted > 0 {
            format!(
                "; yet KVM's counters show {counted} exits over the {:.2} s interval: the tracepoint may not \
                 fire on this KVM (seen with the PVM backend)",
                m.wall_s
            )
        } else {
            format!("; {kvm_vms} of {} VMs run on KVM", m.host.vms.len())
        };
        return SourceStatus {
            status: "no exits",
            detail: format!(
                "no KVM exits in sample (kvm:kvm_exit enabled for {:.2} s{lost}{why})",
                c.duration_s
            ),
            data,
        };
    }
    let per_vm: Vec<String> = m
        .host
        .exits
        .iter()
        .flat_map(|e| &e.vms)
        .map(|v| {
            let mut top: Vec<(&String, &u64)> = v.reasons.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let top: Vec<String> = top
                .iter()
                .take(3)
                .map(|(r, n)| format!("{r} {:.0}%", 100.0 * **n as f64 / v.exits.max(1) as f64))
                .collect();
            format!("{} {:.0}/s ({})", v.name, v.exits_per_s, top.join(", "))
        })
        .collect();
    SourceStatus {
        status: "available",
        detail: format!(
            "{} exits in {:.2} s{lost}: {}",
            c.events,
            c.duration_s,
            if per_vm.is_empty() {
                "none from the VMs found".to_string()
            } else {
                per_vm.join("; ")
            }
        ),
        data,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub schema: &'static str,
    /// What is wrong and what to do, from the top finding.
    pub verdict: crate::verdict::Verdict,
    pub roles: Vec<String>,
    pub interval_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    pub summary: Summary,
    /// Present when VMs run on this machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSection>,
    /// Reports of the active probes (`doctor --probe`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes: Option<ProbeReports>,
    /// CPUID (hypervisor, KVM features and hints) and hardware counters.
    pub hardware: crate::hardware::HardwareSection,
    /// Exact guest steal, when the capture ran the collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact_steal: Option<crate::exact_steal::ExactStealSection>,
    /// Most severe first.
    pub findings: Vec<Finding>,
    /// Inputs that were missing or unreadable, and what was skipped.
    pub notes: Vec<String>,
    /// The snapshot or recording is cut off: where, how much is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<stealscope_readers::damage::Damage>,
}

impl DoctorReport {
    /// Adds what the active probes measured: their reports, their
    /// findings (ranked with the rest) and their notes.
    pub fn add_probes(
        &mut self,
        reports: ProbeReports,
        findings: Vec<Finding>,
        notes: Vec<String>,
    ) {
        self.probes = Some(reports);
        self.findings.extend(findings);
        rank(&mut self.findings);
        self.verdict = crate::verdict::of_report(self.damage.as_ref(), &self.findings);
        self.notes.extend(notes);
    }
}

/// What `doctor --probe` measured: the wakeup probe, then the preempt probe
/// unless the run was interrupted first.
#[derive(Debug, Clone)]
pub struct ProbeReports {
    pub wakeup: WakeupReport,
    pub preempt: Option<PreemptReport>,
}

/// In JSON every object of the probe reports has its keys in name order.
impl Serialize for ProbeReports {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        evidence! {"wakeup" => self.wakeup, "preempt" => self.preempt}.serialize(s)
    }
}

/// Stable order: severity, then id, then title (for identical live/offline output).
fn rank(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.title.cmp(&b.title))
    });
}

/// Tick quantisation can put a column a tick above wall time; a CPU cannot
/// be more than 100 % anything, so the report clamps (the raw deltas and any
/// real excess are kept as counter anomalies).
fn pct_of(v: f64) -> Option<f64> {
    pct(v)
}

/// One CPU's busy, idle and steal as shares of the time the kernel
/// accounted to it (they add up to 100). Against /proc/uptime's wall time
/// they summed to 101.6 % on a loaded host: the ticks and the uptime are
/// read at different moments on each side, and a tick count is not a
/// clock. Without accounted time (nothing counted): against wall time.
fn cpu_summary(c: &stealscope_model::cputime::CpuInterval) -> CpuSummary {
    match c.accounted_shares() {
        Some(s) => CpuSummary {
            cpu: c.cpu,
            busy_pct: pct_of(s.busy),
            idle_pct: pct_of(s.idle),
            steal_pct: s.steal.and_then(pct_of),
        },
        None => CpuSummary {
            cpu: c.cpu,
            busy_pct: pct_of(c.busy_pct()),
            idle_pct: pct_of(c.idle_pct()),
            steal_pct: pct_of(c.steal_pct()),
        },
    }
}

pub struct ReportInput<'a> {
    pub model: &'a MachineModel,
    pub interval_s: f64,
    pub hostname: Option<String>,
    pub kernel: Option<String>,
}

pub fn build(input: ReportInput<'_>) -> DoctorReport {
    build_after(input, None)
}

/// [`build`] for a rule run that follows another on the same host (the
/// engine's rule runner): `previous` are that run's findings, which keep
/// the findings between their clearing and firing thresholds
/// ([`crate::hysteresis`]).
pub fn build_after(input: ReportInput<'_>, previous: Option<&[Finding]>) -> DoctorReport {
    let m = input.model;
    let mut findings = run_guest(m);
    crate::hysteresis::settle(&mut findings, previous);
    rank(&mut findings);
    let mut roles = Vec::new();
    if !guest_evidence(m).is_empty() {
        roles.push("guest".to_string());
    }
    let host = host_section(m);
    if host.is_some() {
        roles.push("host".to_string());
    }
    let mut notes = m.notes.clone();
    if let Some(d) = &m.damage {
        notes.extend(d.consequences.iter().cloned());
    }
    let hardware = crate::hardware::section(m);
    notes.extend(crate::hardware::notes(&hardware));
    if m.windows.is_empty() {
        notes.push(
            "no sample series: busy/idle split from the whole interval, burst detection skipped"
                .to_string(),
        );
    }
    if !m.has_steal_column() {
        notes.push(
            "/proc/stat has no steal column (kernel before 2.6.11): steal cannot be measured"
                .to_string(),
        );
    }
    let share = |v: Option<f64>| round_opt(v, 3);
    DoctorReport {
        schema: SCHEMA,
        verdict: crate::verdict::of_report(m.damage.as_ref(), &findings),
        roles,
        interval_s: round_opt(Some(input.interval_s), 3),
        hostname: input.hostname,
        kernel: input.kernel.or_else(|| m.t1.osrelease.clone()),
        summary: Summary {
            steal_pct: m.steal_pct().and_then(pct_of),
            cpus: m.interval.cpus.iter().map(cpu_summary).collect(),
            steal_busy_share: share(m.split.busy_share()),
            steal_idle_share: share(m.split.idle_share()),
            windows: m.windows.len(),
            wall_s: round_opt(Some(m.wall_s), 3),
        },
        host,
        probes: None,
        hardware,
        exact_steal: crate::exact_steal::section(m.t1.exact_steal.as_ref()),
        findings,
        notes,
        damage: m.damage.clone(),
    }
}

/// `stealscope host --json` (schema stealscope/host/1): the host section
/// and the host findings only.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub schema: &'static str,
    /// What is wrong on the host and what to do, from the top host finding.
    pub verdict: crate::verdict::Verdict,
    pub interval_s: Option<f64>,
    pub vms: Vec<stealscope_model::host::VmSteal>,
    pub hypervisor: Option<Hypervisor>,
    #[serde(serialize_with = "in_key_order")]
    pub kvm_stats: Option<KvmStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm_binary_stats: Option<SourceStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm_exit_sample: Option<SourceStatus>,
    #[serde(flatten)]
    pub who: Option<WhoStole>,
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
    /// The snapshot or recording is cut off (as [`DoctorReport::damage`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<stealscope_readers::damage::Damage>,
}

pub fn host_report(d: DoctorReport) -> HostReport {
    let who = d.host.as_ref().map(|h| h.who.clone());
    let damage = d.damage.clone();
    let (vms, hypervisor, kvm_stats, binary, exits) = match d.host {
        Some(h) => (
            h.vms,
            Some(h.hypervisor),
            Some(h.kvm_stats),
            Some(h.kvm_binary_stats),
            Some(h.kvm_exit_sample),
        ),
        None => (Vec::new(), None, None, None, None),
    };
    // The host view leaves out the guest-side hardware notes (CPUID, counters).
    let hw_notes = crate::hardware::notes(&d.hardware);
    let mut notes: Vec<String> = d
        .notes
        .into_iter()
        .filter(|n| !hw_notes.contains(n))
        .collect();
    if vms.is_empty() {
        notes.push("no VMs found (QEMU, Firecracker or libvirt-managed processes)".into());
    }
    let findings: Vec<Finding> = d
        .findings
        .into_iter()
        .filter(|f| f.id.starts_with("host."))
        .collect();
    HostReport {
        schema: "stealscope/host/1",
        verdict: crate::verdict::of_report(damage.as_ref(), &findings),
        interval_s: d.interval_s,
        vms,
        hypervisor,
        kvm_stats,
        kvm_binary_stats: binary,
        kvm_exit_sample: exits,
        who,
        findings,
        notes,
        damage,
    }
}
