//! JSON rendering (the `--json` contract in docs/contract.md) for every report.

use serde::Serialize;

pub fn render<T: Serialize>(report: &T) -> String {
    // Reports are plain data with string keys: serialising cannot fail.
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// `--json` or the text: every command's last step, so the choice is
/// written once.
pub fn or_text<T: Serialize>(json: bool, report: &T, text: impl FnOnce() -> String) -> String {
    if json {
        render(report)
    } else {
        text()
    }
}
