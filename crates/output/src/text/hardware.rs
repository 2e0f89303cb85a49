//! The hardware part of the doctor text (CPUID facts, counter figures per
//! CPU) and the one-line probe summaries.

use super::fmt_value;
use super::layout::Style;
use std::fmt::Write;
use stealscope_analysis::hardware::HardwareSection;
use stealscope_analysis::report::ProbeReports;
use stealscope_findings::{units, Evidence};

/// CPUID facts and per-CPU counter figures; why a counter is missing is in
/// the notes.
pub(super) fn section(out: &mut String, st: &Style, h: &HardwareSection) {
    let _ = writeln!(out);
    match &h.cpuid {
        None => {
            let _ = writeln!(out, "{}: CPUID not captured", st.bold("Hardware"));
        }
        Some(c) => cpuid(out, st, c),
    }
    counters(out, st, h);
}

/// The hypervisor signatures, the KVM features and hints, APERF/MPERF.
fn cpuid(out: &mut String, st: &Style, c: &stealscope_readers::cpuid::CpuidFacts) {
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
    st.wrap(
        out,
        &format!("{}: ", st.bold("Hardware")),
        &format!(
            "{} (CPUID hypervisor bit {}), vendor {}",
            if sigs.is_empty() {
                "no hypervisor signature".to_string()
            } else {
                sigs.join(", ")
            },
            c.hypervisor_bit
                .map_or("n/a", |b| if b { "set" } else { "clear" }),
            c.vendor.as_deref().unwrap_or("n/a")
        ),
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
        st.wrap(
            out,
            "  KVM features: ",
            &format!("{} (EAX {})", short(&k.features), k.features_eax),
        );
        let hints = if k.hints.is_empty() {
            "none (KVM_HINTS_REALTIME clear)".to_string()
        } else {
            short(&k.hints)
        };
        st.wrap(
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

/// The counters that opened and their figures per CPU.
fn counters(out: &mut String, st: &Style, h: &HardwareSection) {
    let Some(c) = &h.counters else {
        let _ = writeln!(out, "  counters: not captured");
        return;
    };
    if c.opened.is_empty() {
        let _ = writeln!(out, "  counters: none could be opened (see notes)");
        return;
    }
    st.wrap(
        out,
        "  counters: ",
        &format!("{} over {} windows", c.opened.join(" "), c.windows),
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
pub(super) fn probes_summary(out: &mut String, st: &Style, p: &ProbeReports) {
    let _ = writeln!(out, "\n{}", st.bold("Probes"));
    let w = &p.wakeup;
    let o = &w.overall;
    st.wrap(
        out,
        "  wakeup   ",
        &format!(
            "timer latency p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs ({})",
            o.p50_us, o.p99_us, o.max_us, w.policy
        ),
    );
    if let Some(p) = &p.preempt {
        st.wrap(
            out,
            "  preempt  ",
            &format!(
                "hypervisor (unexplained) {:.2}% of CPU, longest stall {:.1} µs (attribution: {})",
                p.overall.unexplained_pct, p.overall.max_unexplained_gap_us, p.attribution
            ),
        );
    }
}
