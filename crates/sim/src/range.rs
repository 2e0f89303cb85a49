//! The mean and range over seeds, and the one rounding of sim's figures,
//! shared by the per-case report (report.rs) and the fleet's (fleet.rs).

use serde::Serialize;

/// Mean and range over repeated runs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Range {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Range {
    pub fn of(v: &[f64]) -> Range {
        if v.is_empty() {
            return Range {
                mean: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        Range {
            mean: round(v.iter().sum::<f64>() / v.len() as f64),
            min: round(v.iter().copied().fold(f64::INFINITY, f64::min)),
            max: round(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        }
    }
}

/// Two decimals, the way every report rounds (`stealscope_findings::units`).
pub fn round(x: f64) -> f64 {
    stealscope_findings::units::round(x, 2)
}
