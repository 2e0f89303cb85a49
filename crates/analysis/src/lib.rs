//! Analysis: rules that read the model and produce findings with evidence
//! and remedies, and the doctor report that ranks them.

pub mod exact_steal;
pub mod finding;
pub mod hardware;
#[cfg(test)]
mod host_noisy_tests;
pub mod hysteresis;
pub mod notes;
pub mod report;
#[cfg(test)]
mod report_tests;
pub mod roles;
pub mod rules;
#[cfg(test)]
pub(crate) mod testing;
pub mod verdict;

pub use finding::{Finding, Severity};
pub use report::{build, build_after, host_report, DoctorReport, HostReport, ReportInput};
pub use verdict::Verdict;
