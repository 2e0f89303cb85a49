//! The doctor report (SPEC.md "JSON report"): summary, ranked findings, notes.

use crate::finding::{round, Finding};
use crate::roles::guest_evidence;
use crate::rules::run_guest;
use serde::Serialize;
use serde_json::Value;
use stealscope_model::GuestModel;

pub const SCHEMA: &str = "stealscope/doctor/1";

#[derive(Debug, Clone, Serialize)]
pub struct CpuSummary {
    pub cpu: u32,
    pub busy_pct: Value,
    pub idle_pct: Value,
    pub steal_pct: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Mean over CPUs, % of wall time; null when no CPU was online throughout.
    pub steal_pct: Value,
    pub cpus: Vec<CpuSummary>,
    /// Share of steal that hit busy / idle windows; null when no steal.
    pub steal_busy_share: Value,
    pub steal_idle_share: Value,
    pub windows: usize,
    pub wall_s: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub schema: &'static str,
    pub roles: Vec<String>,
    pub interval_s: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    pub summary: Summary,
    /// Most severe first.
    pub findings: Vec<Finding>,
    /// Inputs that were missing or unreadable, and what was skipped.
    pub notes: Vec<String>,
}

/// Tick quantisation can put a column a tick above wall time; a CPU cannot
/// be more than 100 % anything, so the report clamps (the raw deltas and any
/// real excess are kept as counter anomalies).
fn pct(v: f64) -> Value {
    round(v.clamp(0.0, 100.0), 2)
}

pub struct ReportInput<'a> {
    pub model: &'a GuestModel,
    pub interval_s: f64,
    pub hostname: Option<String>,
    pub kernel: Option<String>,
}

pub fn build(input: ReportInput<'_>) -> DoctorReport {
    let m = input.model;
    let mut findings = run_guest(m);
    // Stable order: severity, then id, then title (for identical live/offline output).
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.id.cmp(&b.id))
            .then_with(|| a.title.cmp(&b.title))
    });
    let mut roles = Vec::new();
    if !guest_evidence(m).is_empty() {
        roles.push("guest".to_string());
    }
    let mut notes = m.notes.clone();
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
    let share = |v: Option<f64>| v.map_or(Value::Null, |x| round(x, 3));
    DoctorReport {
        schema: SCHEMA,
        roles,
        interval_s: round(input.interval_s, 3),
        hostname: input.hostname,
        kernel: input.kernel.or_else(|| m.t1.osrelease.clone()),
        summary: Summary {
            steal_pct: m.steal_pct().map_or(Value::Null, pct),
            cpus: m
                .interval
                .cpus
                .iter()
                .map(|c| CpuSummary {
                    cpu: c.cpu,
                    busy_pct: pct(c.busy_pct()),
                    idle_pct: pct(c.idle_pct()),
                    steal_pct: pct(c.steal_pct()),
                })
                .collect(),
            steal_busy_share: share(m.split.busy_share()),
            steal_idle_share: share(m.split.idle_share()),
            windows: m.windows.len(),
            wall_s: round(m.wall_s, 3),
        },
        findings,
        notes,
    }
}
