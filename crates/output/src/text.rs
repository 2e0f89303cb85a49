//! Human-readable report: verdict first, per-CPU table, findings ranked by
//! severity with evidence and the fix. Colour only when asked (on a TTY).

use std::fmt::Write;
use stealscope_analysis::hardware::HardwareSection;
use stealscope_analysis::report::{Hypervisor, KvmStats, ProbeReports, SourceStatus};
use stealscope_analysis::{DoctorReport, Finding, HostReport, Severity};
use stealscope_findings::units::{self, num_text};
use stealscope_findings::Evidence;
use stealscope_model::host::VmSteal;

const WIDTH: usize = 100;

struct Style {
    color: bool,
}

impl Style {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn severity(&self, sev: Severity) -> String {
        match sev {
            Severity::Critical => self.paint("1;31", "CRITICAL"),
            Severity::Warning => self.paint("1;33", "WARNING"),
            Severity::Info => self.paint("36", "info"),
        }
    }
    fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
}

/// Wraps words to WIDTH; the first line starts with `lead`, the others are
/// indented to line up under it.
fn wrap(out: &mut String, lead: &str, text: &str) {
    let hang = " ".repeat(lead.chars().count());
    let mut indent = lead.to_string();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.chars().count() + line.len() + 1 + word.len() > WIDTH {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
            indent.clone_from(&hang);
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}

/// Evidence as the text report prints it (see `stealscope_findings::units`).
pub(crate) fn fmt_value(v: &Evidence) -> String {
    units::value(v)
}

/// A percentage: one decimal, `n/a` when unknown.
pub(crate) fn pct(v: &Option<f64>) -> String {
    units::pct_text(*v)
}

fn finding(out: &mut String, st: &Style, f: &Finding) {
    let _ = writeln!(
        out,
        "[{}] {}  {}",
        st.severity(f.severity),
        st.bold(&f.id),
        f.title
    );
    let ev: Vec<String> = f
        .evidence
        .iter()
        .filter(|(k, _)| k.as_str() != "files" && k.as_str() != "per_cpu")
        .map(|(k, v)| format!("{k}={}", fmt_value(v)))
        .collect();
    if !ev.is_empty() {
        wrap(out, "    evidence: ", &ev.join(", "));
    }
    if let Some(Evidence::List(files)) = f.evidence.get("files") {
        let names: Vec<String> = files.iter().map(fmt_value).collect();
        wrap(out, "    from:     ", &names.join(" "));
    }
    wrap(out, "    fix:      ", &f.remedy);
    if let Some(c) = &f.case {
        let _ = writeln!(out, "    case:     {c}");
    }
}

pub fn doctor(r: &DoctorReport, color: bool) -> String {
    let st = Style { color };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} on {} (kernel {}), roles: {}, interval {} s, {} windows",
        st.bold("stealscope doctor"),
        r.hostname.as_deref().unwrap_or("?"),
        r.kernel.as_deref().unwrap_or("?"),
        if r.roles.is_empty() {
            "none detected".to_string()
        } else {
            r.roles.join(",")
        },
        pct(&r.summary.wall_s),
        r.summary.windows
    );
    let s = &r.summary;
    let split = match (s.steal_busy_share, s.steal_idle_share) {
        (Some(b), Some(i)) => format!(
            " ({:.0}% of it while vCPUs were busy, {:.0}% while idle, {:.0}% mixed)",
            100.0 * b,
            100.0 * i,
            (100.0 * (1.0 - b - i)).max(0.0)
        ),
        _ => String::new(),
    };
    let _ = writeln!(out, "\nSteal: {}% of CPU time{split}\n", pct(&s.steal_pct));
    let _ = writeln!(out, "  CPU   busy%   idle%  steal%");
    for c in &s.cpus {
        let _ = writeln!(
            out,
            "  {:>3}  {:>6}  {:>6}  {:>6}",
            c.cpu,
            pct(&c.busy_pct),
            pct(&c.idle_pct),
            pct(&c.steal_pct)
        );
    }
    hardware(&mut out, &st, &r.hardware);
    if let Some(h) = &r.host {
        let kvm = KvmLines {
            debugfs: Some(&h.kvm_stats),
            binary: Some(&h.kvm_binary_stats),
            exits: Some(&h.kvm_exit_sample),
        };
        host_table(&mut out, &st, &h.vms, &h.hypervisor, &kvm);
        out.push_str(&crate::text_who::who_stole(&h.who, &h.vms, &|s| st.bold(s)));
    }
    if let Some(p) = &r.probes {
        probes_summary(&mut out, &st, p);
    }
    let warn = r
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .count();
    let _ = writeln!(
        out,
        "\n{} ({} finding{}, {} warning or worse)",
        st.bold("Findings"),
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" },
        warn
    );
    if r.findings.is_empty() {
        let _ = writeln!(out, "  none: no known cause of steal or jitter is present");
    }
    findings_and_notes(&mut out, &st, &r.findings, &r.notes);
    out
}

/// CPUID facts and per-CPU counter figures; why a counter is missing is in
/// the notes.
fn hardware(out: &mut String, st: &Style, h: &HardwareSection) {
    let _ = writeln!(out);
    match &h.cpuid {
        None => {
            let _ = writeln!(out, "{}: CPUID not captured", st.bold("Hardware"));
        }
        Some(c) => {
            let sigs: Vec<String> = c
                .hypervisors
                .iter()
                .map(|hv| {
                    format!(
                        "{} at {}",
                        hv.name.as_deref().unwrap_or(&hv.signature),
                        hv.base
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "{}: {} (CPUID hypervisor bit {}), vendor {}",
                st.bold("Hardware"),
                if sigs.is_empty() {
                    "no hypervisor signature".to_string()
                } else {
                    sigs.join(", ")
                },
                c.hypervisor_bit
                    .map_or("n/a", |b| if b { "set" } else { "clear" }),
                c.vendor.as_deref().unwrap_or("n/a")
            );
            if let Some(k) = &c.kvm {
                let short = |v: &[String]| {
                    v.iter()
                        .map(|f| {
                            f.trim_start_matches("KVM_FEATURE_")
                                .trim_start_matches("KVM_HINTS_")
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                wrap(
                    out,
                    "  KVM features: ",
                    &format!("{} (EAX {})", short(&k.features), k.features_eax),
                );
                let hints = if k.hints.is_empty() {
                    "none (KVM_HINTS_REALTIME clear)".to_string()
                } else {
                    short(&k.hints)
                };
                wrap(
                    out,
                    "  KVM hints:    ",
                    &format!("{hints} (EDX {})", k.hints_edx),
                );
            }
            let yn = |b: Option<bool>| b.map_or("n/a", |b| if b { "yes" } else { "no" });
            let _ = writeln!(
                out,
                "  APERF/MPERF (CPUID.06H:ECX[0]): {}",
                yn(c.aperfmperf)
            );
        }
    }
    let Some(c) = &h.counters else {
        let _ = writeln!(out, "  counters: not captured");
        return;
    };
    if c.opened.is_empty() {
        let _ = writeln!(out, "  counters: none could be opened (see notes)");
        return;
    }
    let _ = writeln!(
        out,
        "  counters: {} over {} windows",
        c.opened.join(" "),
        c.windows
    );
    let _ = writeln!(
        out,
        "\n  CPU     IPC  miss%  TSC MHz  Avg MHz  Bzy MHz  %Busy   SMI"
    );
    let num = |v: &Option<f64>, scale: f64, d: usize| {
        v.map_or(units::NA.to_string(), |x| format!("{:.*}", d, x * scale))
    };
    for cpu in &c.cpus {
        let _ = writeln!(
            out,
            "  {:>3}  {:>6}  {:>5}  {:>7}  {:>7}  {:>7}  {:>5}  {:>4}",
            cpu.cpu,
            num(&cpu.ipc, 1.0, 2),
            num(&cpu.cache_miss_rate, 100.0, 1),
            num(&cpu.tsc_mhz, 1.0, 0),
            num(&cpu.avg_mhz, 1.0, 0),
            num(&cpu.busy_mhz, 1.0, 0),
            num(&cpu.busy_pct, 1.0, 1),
            fmt_value(&Evidence::from(cpu.smi))
        );
    }
}

/// One line per probe that ran under `doctor --probe` (the whole reports
/// are in the JSON).
fn probes_summary(out: &mut String, st: &Style, p: &ProbeReports) {
    let _ = writeln!(out, "\n{}", st.bold("Probes"));
    let w = &p.wakeup;
    let o = &w.overall;
    let _ = writeln!(
        out,
        "  wakeup   timer latency p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({})",
        o.p50_us, o.p99_us, o.max_us, w.policy
    );
    if let Some(p) = &p.preempt {
        let _ = writeln!(
            out,
            "  preempt  hypervisor (unexplained) {:.2}% of CPU, longest stall {:.1} µs (attribution: {})",
            p.overall.unexplained_pct, p.overall.max_unexplained_gap_us, p.attribution
        );
    }
}

/// Findings ranked as given, then the notes: the tail of every report.
fn findings_and_notes(out: &mut String, st: &Style, findings: &[Finding], notes: &[String]) {
    for f in findings {
        out.push('\n');
        finding(out, st, f);
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\n{}", st.bold("Notes"));
        for n in notes {
            wrap(out, "  - ", n);
        }
    }
}

/// What the host table says about each KVM statistics source.
struct KvmLines<'a> {
    debugfs: Option<&'a KvmStats>,
    binary: Option<&'a SourceStatus>,
    exits: Option<&'a SourceStatus>,
}

fn host_table(out: &mut String, st: &Style, vms: &[VmSteal], hv: &Hypervisor, kvm: &KvmLines) {
    let _ = writeln!(
        out,
        "\n{}: {} VM(s); vCPUs waited {} CPU-s while host CPUs idled {} CPU-s (busy steal {}, idle steal {})",
        st.bold("Host"),
        vms.len(),
        num_text(hv.vcpu_wait_cpu_s),
        num_text(hv.host_idle_cpu_s),
        share(&hv.busy_steal_share),
        share(&hv.idle_steal_share)
    );
    let _ = writeln!(
        out,
        "\n  VM                  pid     kind         vCPUs by      vCPU    tid   steal%  util%  CPUs"
    );
    for vm in vms {
        for (i, c) in vm.vcpus.iter().enumerate() {
            let (name, pid, kind, by) = if i == 0 {
                (
                    vm.name.as_str(),
                    vm.pid.to_string(),
                    vm.kind,
                    vm.vcpu_source,
                )
            } else {
                ("", String::new(), "", "")
            };
            let cpus = c
                .cpus_allowed
                .as_ref()
                .map(|v| stealscope_readers::cpulist::format(v))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:<18.18}  {:>6}  {:<11}  {:<12}  {:>4}  {:>6}  {:>6.1}  {:>5.1}  {}",
                name, pid, kind, by, c.index, c.tid, c.host_steal_pct, c.util_pct, cpus
            );
        }
        if vm.vcpus.is_empty() {
            let _ = writeln!(
                out,
                "  {:<18.18}  {:>6}  {:<11}  (no vCPU threads identified)",
                vm.name, vm.pid, vm.kind
            );
        }
    }
    if let Some(s) = kvm.debugfs.and_then(KvmStats::missing) {
        wrap(out, "  KVM debugfs: ", s);
    }
    if let Some(b) = kvm.binary {
        wrap(out, "  KVM binary stats: ", &b.detail);
    }
    if let Some(e) = kvm.exits {
        wrap(out, "  KVM exits: ", &e.detail);
    }
}

fn share(v: &Option<f64>) -> String {
    v.map_or(units::NA.to_string(), |x| format!("{:.0}%", 100.0 * x))
}

pub fn host(r: &HostReport, color: bool) -> String {
    let st = Style { color };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} interval {} s",
        st.bold("stealscope host"),
        num_text(r.interval_s)
    );
    if let Some(hv) = &r.hypervisor {
        let kvm = KvmLines {
            debugfs: r.kvm_stats.as_ref(),
            binary: r.kvm_binary_stats.as_ref(),
            exits: r.kvm_exit_sample.as_ref(),
        };
        host_table(&mut out, &st, &r.vms, hv, &kvm);
        if let Some(w) = &r.who {
            out.push_str(&crate::text_who::who_stole(w, &r.vms, &|s| st.bold(s)));
        }
    }
    let _ = writeln!(out, "\n{} ({})", st.bold("Host findings"), r.findings.len());
    findings_and_notes(&mut out, &st, &r.findings, &r.notes);
    out
}
