//! JSON rendering (the `--json` contract in SPEC.md).

use stealscope_analysis::{DoctorReport, HostReport};

pub fn doctor(report: &DoctorReport) -> String {
    // Serialising plain data with string keys cannot fail.
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

pub fn host(report: &HostReport) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
