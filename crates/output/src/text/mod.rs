//! Human-readable report: verdict first, per-CPU table, findings ranked by
//! severity with evidence and the fix. Colour only when asked (on a TTY).

mod exact_steal;
mod hardware;
mod host;
pub(crate) mod layout;
mod who;
mod who_time;

pub(crate) use exact_steal::{victim as exact_steal_victim, LARGEST as EXACT_LARGEST};
pub(crate) use who::own_line as who_own_line;

pub use layout::TextOpts;

use host::KvmLines;
use layout::Style;
use std::fmt::Write;
use stealscope_analysis::hardware::HardwareSection;
use stealscope_analysis::{DoctorReport, Finding, HostReport, Severity, Verdict};
use stealscope_findings::units::{self};
use stealscope_findings::Evidence;

/// Evidence as the text report prints it (see `stealscope_findings::units`).
pub(crate) fn fmt_value(v: &Evidence) -> String {
    units::value(v)
}

/// A percentage: one decimal, `n/a` when unknown.
pub(crate) fn pct(v: &Option<f64>) -> String {
    units::pct_text(*v)
}

pub(crate) fn share(v: &Option<f64>) -> String {
    v.map_or(units::NA.to_string(), |x| format!("{:.0}%", 100.0 * x))
}

/// The first lines of every report: what is wrong and what to do.
fn verdict(out: &mut String, st: &Style, v: &Verdict) {
    let label = match v.status {
        "critical" => st.severity(Severity::Critical),
        "warning" => st.severity(Severity::Warning),
        stealscope_analysis::verdict::CUT_OFF => st.paint("1;31", "CUT OFF"),
        _ => st.paint("1;32", "OK"),
    };
    let mut tail = Vec::new();
    if let Some(id) = &v.finding {
        if v.status != "info" {
            tail.push(id.clone());
        }
    }
    if v.more > 0 {
        tail.push(format!(
            "{} more warning{} below",
            v.more,
            if v.more == 1 { "" } else { "s" }
        ));
    }
    let tail = if tail.is_empty() {
        String::new()
    } else {
        format!(" [{}]", tail.join("; "))
    };
    // "CRITICAL: " and "     Fix: " line up.
    let lead = format!("{label}: ");
    let pad = 10usize.saturating_sub(v.status.len().min(8) + 2);
    let lead = format!("{}{lead}", " ".repeat(pad));
    st.wrap_hang(
        out,
        &lead,
        &" ".repeat(10),
        &format!("{}{tail}", v.headline),
    );
    if let Some(fix) = &v.fix {
        st.wrap(out, &format!("     {}: ", st.bold("Fix")), fix);
    }
}

fn finding(out: &mut String, st: &Style, f: &Finding) {
    let lead = format!("[{}] {}  ", st.severity(f.severity), st.bold(&f.id));
    st.wrap_hang(out, &lead, "    ", &f.title);
    let ev: Vec<String> = f
        .evidence
        .iter()
        .filter(|(k, _)| k.as_str() != "files" && k.as_str() != "per_cpu")
        .flat_map(|(k, v)| match (st.verbose, v) {
            // A map (a culprit, say) as one item per known field: a JSON
            // blob has no space to wrap at and ran past 80 columns.
            (_, Evidence::Map(m)) => m
                .iter()
                .filter(|(_, x)| !matches!(x, Evidence::Null))
                .map(|(sub, x)| format!("{k}.{sub}={}", fmt_value(x)))
                .collect(),
            (true, Evidence::List(_)) => vec![format!("{k}={v}")],
            _ => vec![format!("{k}={}", fmt_value(v))],
        })
        .collect();
    if !ev.is_empty() {
        st.items(out, "    evidence: ", &ev, ", ");
    }
    if let Some(Evidence::List(files)) = f.evidence.get("files") {
        let names: Vec<String> = files.iter().map(fmt_value).collect();
        st.items(out, "    from:     ", &names, " ");
    }
    st.wrap(out, "    fix:      ", &f.remedy);
    if let Some(c) = &f.case {
        st.wrap(out, "    case:     ", c);
    }
}

/// "Steal: 3.4% of CPU time (…)", or "none" when it rounds to zero (a
/// split of nothing is noise).
fn steal_line(out: &mut String, st: &Style, r: &DoctorReport) {
    let s = &r.summary;
    let on_host = r.host.is_some() && !r.roles.iter().any(|x| x == "guest");
    let label = if on_host {
        "Steal of this machine's own CPUs (as a guest)"
    } else {
        "Steal"
    };
    let text = match s.steal_pct {
        None => "not measured".to_string(),
        Some(p) if p < 0.05 => format!("none ({}% of CPU time)", pct(&s.steal_pct)),
        Some(_) => {
            let split = match (s.steal_busy_share, s.steal_idle_share) {
                (Some(b), Some(i)) => format!(
                    " ({:.0}% of it while vCPUs were busy, {:.0}% while idle, {:.0}% mixed)",
                    100.0 * b,
                    100.0 * i,
                    (100.0 * (1.0 - b - i)).max(0.0)
                ),
                _ => String::new(),
            };
            format!("{}% of CPU time{split}", pct(&s.steal_pct))
        }
    };
    out.push('\n');
    st.wrap(out, &format!("{}: ", st.bold(label)), &text);
}

/// The exact guest steal's one line (issue 30), or why it did not run
/// (said only with `-v`: the /proc/stat line above stands on its own).
fn exact_steal_line(out: &mut String, st: &Style, r: &DoctorReport) {
    use stealscope_analysis::exact_steal::ExactStealSection;
    match &r.exact_steal {
        Some(ExactStealSection::Measured(m)) => {
            st.wrap(out, &format!("{}: ", st.bold("Exact steal")), &m.headline);
        }
        Some(ExactStealSection::Unavailable { reason }) if st.verbose => {
            st.wrap(out, "Exact steal: not measured: ", reason);
        }
        _ => {}
    }
}

fn cpu_table(out: &mut String, r: &DoctorReport) {
    let _ = writeln!(out, "\n  CPU   busy%   idle%  steal%");
    for c in &r.summary.cpus {
        let _ = writeln!(
            out,
            "  {:>3}  {:>6}  {:>6}  {:>6}",
            c.cpu,
            pct(&c.busy_pct),
            pct(&c.idle_pct),
            pct(&c.steal_pct)
        );
    }
}

pub fn doctor(r: &DoctorReport, o: &TextOpts) -> String {
    doctor_with(r, o, None, None)
}

/// `report FILE` in text: the doctor's report of a snapshot or recording,
/// with who stole it over time after who stole it (a recording on a host)
/// and a recording's exact steal after the steal line.
pub fn report(
    r: &DoctorReport,
    over_time: Option<&[crate::who_time::VmOverTime]>,
    timeline: &stealscope_model::timeline::Timeline,
    o: &TextOpts,
) -> String {
    doctor_with(r, o, over_time, Some(timeline))
}

fn doctor_with(
    r: &DoctorReport,
    o: &TextOpts,
    over_time: Option<&[crate::who_time::VmOverTime]>,
    timeline: Option<&stealscope_model::timeline::Timeline>,
) -> String {
    let st = Style::new(o);
    let mut out = String::new();
    let windows = r.summary.windows;
    st.wrap_hang(
        &mut out,
        &format!("{} ", st.bold("stealscope doctor")),
        "  ",
        &format!(
            "on {} (kernel {}), roles: {}, interval {} s, {windows} window{}",
            r.hostname.as_deref().unwrap_or("?"),
            r.kernel.as_deref().unwrap_or("?"),
            if r.roles.is_empty() {
                "none detected".to_string()
            } else {
                r.roles.join(",")
            },
            pct(&r.summary.wall_s),
            if windows == 1 { "" } else { "s" },
        ),
    );
    out.push('\n');
    verdict(&mut out, &st, &r.verdict);
    // On a host the VMs' wait is the story: their table comes first.
    let host = r.host.as_ref().map(|h| {
        let kvm = KvmLines {
            debugfs: Some(&h.kvm_stats),
            binary: Some(&h.kvm_binary_stats),
            exits: Some(&h.kvm_exit_sample),
        };
        let mut s = String::new();
        host::section(&mut s, &st, &h.vms, &h.hypervisor, &kvm);
        s.push_str(&who::who_stole(&h.who, &h.vms, &st));
        if let Some(v) = over_time {
            who_time::section(&mut s, &st, v, h.who.attribution.route != "none");
        }
        s
    });
    let host_first = r.roles.iter().any(|x| x == "host");
    if host_first {
        out.push_str(host.as_deref().unwrap_or_default());
    }
    steal_line(&mut out, &st, r);
    exact_steal_line(&mut out, &st, r);
    if let Some(t) = timeline {
        exact_steal::section(&mut out, &st, r, t);
    }
    cpu_table(&mut out, r);
    hardware::section(&mut out, &st, &r.hardware);
    if !host_first {
        out.push_str(host.as_deref().unwrap_or_default());
    }
    if let Some(p) = &r.probes {
        hardware::probes_summary(&mut out, &st, p);
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
    findings_and_notes(&mut out, &st, &r.findings, &r.notes, Some(&r.hardware));
    out
}

/// Findings ranked as given, then the notes (in brief unless verbose):
/// the tail of every report.
fn findings_and_notes(
    out: &mut String,
    st: &Style,
    findings: &[Finding],
    notes: &[String],
    hw: Option<&HardwareSection>,
) {
    for f in findings {
        out.push('\n');
        finding(out, st, f);
    }
    if notes.is_empty() {
        return;
    }
    let shown = if st.verbose {
        notes.to_vec()
    } else {
        stealscope_analysis::notes::brief(notes, hw)
    };
    let more = if !st.verbose && shown != notes {
        " (in full with -v or --json)"
    } else {
        ""
    };
    let _ = writeln!(out, "\n{}{more}", st.bold("Notes"));
    for n in &shown {
        st.wrap(out, "  - ", n);
    }
}

pub fn host(r: &HostReport, o: &TextOpts) -> String {
    let st = Style::new(o);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} interval {} s\n",
        st.bold("stealscope host"),
        units::num_text(r.interval_s)
    );
    verdict(&mut out, &st, &r.verdict);
    if let Some(hv) = &r.hypervisor {
        let kvm = KvmLines {
            debugfs: r.kvm_stats.as_ref(),
            binary: r.kvm_binary_stats.as_ref(),
            exits: r.kvm_exit_sample.as_ref(),
        };
        host::section(&mut out, &st, &r.vms, hv, &kvm);
        if let Some(w) = &r.who {
            out.push_str(&who::who_stole(w, &r.vms, &st));
        }
    }
    let _ = writeln!(out, "\n{} ({})", st.bold("Host findings"), r.findings.len());
    findings_and_notes(&mut out, &st, &r.findings, &r.notes, None);
    out
}
