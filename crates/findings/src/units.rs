//! Rounding, units and "unknown": every figure a report shows passes through
//! here, whichever output (text, JSON, HTML, TUI) shows it. JSON carries the
//! rounded number or null; text shows `n/a` for null.

use crate::Evidence;

/// What every output prints for a figure that is not known.
pub const NA: &str = "n/a";

/// `v` rounded to `digits` decimals.
pub fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// Rounded, or None when absent or not finite.
pub fn round_opt(v: Option<f64>, digits: i32) -> Option<f64> {
    v.filter(|x| x.is_finite()).map(|x| round(x, digits))
}

/// A share of a CPU in %, clamped to [0, 100] (tick quantisation can put a
/// column a tick above wall time), two decimals.
pub fn pct(v: f64) -> Option<f64> {
    round_opt(Some(v.clamp(0.0, 100.0)), 2)
}

/// A percentage as text: one decimal, `n/a` when unknown.
pub fn pct_text(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.1}"),
        _ => NA.to_string(),
    }
}

/// A figure as text, as JSON prints it (`5.0`, `0.125`), `n/a` when unknown.
pub fn num_text(v: Option<f64>) -> String {
    value(&Evidence::from(v))
}

/// A value with up to `digits` decimals, trailing zeros dropped.
pub fn trimmed(v: f64, digits: usize) -> String {
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Evidence as text: strings bare, null as `n/a`, long lists as a count,
/// anything else as compact JSON.
pub fn value(v: &Evidence) -> String {
    match v {
        Evidence::Str(s) => s.clone(),
        Evidence::Null => NA.to_string(),
        Evidence::List(a) if a.len() > 6 || a.iter().any(|e| matches!(e, Evidence::Map(_))) => {
            format!("[{} item{}]", a.len(), if a.len() == 1 { "" } else { "s" })
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_unknowns() {
        assert_eq!(round(1.23456, 2), 1.23);
        assert_eq!(round_opt(Some(f64::NAN), 2), None);
        assert_eq!(pct(100.4), Some(100.0));
        assert_eq!(pct_text(None), "n/a");
        assert_eq!(pct_text(Some(12.345)), "12.3");
        assert_eq!(num_text(Some(5.0)), "5.0");
        assert_eq!(num_text(None), "n/a");
        assert_eq!(trimmed(1.50, 2), "1.5");
        assert_eq!(value(&Evidence::from(vec![1u8; 7])), "[7 items]");
    }
}
