//! JSON rendering (the `--json` contract in SPEC.md) for every report.

use serde::Serialize;

pub fn render<T: Serialize>(report: &T) -> String {
    // Reports are plain data with string keys: serialising cannot fail.
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
