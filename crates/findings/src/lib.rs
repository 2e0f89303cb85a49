//! The leaf of every report: a [`Finding`] (stable id, [`Severity`], typed
//! [`Evidence`], remedy), and [`units`], the one place where figures are
//! rounded and where "unknown" is spelled (`n/a` in text, `null` in JSON).
//!
//! Rules (`stealscope-analysis`) and probes (`stealscope-probes`) both build
//! findings with the same builder; output crates read the same types; JSON
//! is made only when a report is written out.

pub mod evidence;
pub mod finding;
pub mod units;

pub use evidence::Evidence;
pub use finding::{round, Finding, Severity};
