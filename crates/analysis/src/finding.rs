//! Findings are defined in the leaf crate `stealscope-findings`, which the
//! probes build too; re-exported here under their old paths.

pub use stealscope_findings::{evidence, round, Evidence, Finding, Severity};
