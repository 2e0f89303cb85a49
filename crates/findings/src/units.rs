//! Rounding, units and "unknown": every figure a report shows passes through
//! here, whichever output (text, JSON, HTML, TUI) shows it. JSON carries the
//! rounded number or null; text shows `n/a` for null. [`RenderConfig`] says
//! it once per unit (after below's render crate, `RenderConfig`): decimals
//! for people and for JSON, width in a table, suffix. It lives in this leaf
//! rather than in stealscope-output because JSON figures are rounded where
//! the reports are built (analysis), below the output layer.

use crate::Evidence;

/// What every output prints for a figure that is not known.
pub const NA: &str = "n/a";

/// How a figure of one unit is rounded and shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenderConfig {
    /// Decimals in text, HTML and the TUI.
    pub decimals: usize,
    /// Decimals JSON keeps.
    pub json_decimals: i32,
    /// Clamped to this range before JSON rounding.
    pub clamp: Option<(f64, f64)>,
    /// Right-aligned to this width (tables); None: as long as it is.
    pub width: Option<usize>,
    /// After the number ("%" in the TUI), never after [`NA`].
    pub suffix: &'static str,
}

/// A share of a CPU or of wall time, in %: `12.3` to people, `12.35` in
/// JSON, clamped to [0, 100] there (tick quantisation can put a column a
/// tick above wall time).
pub const PERCENT: RenderConfig = RenderConfig {
    decimals: 1,
    json_decimals: 2,
    clamp: Some((0.0, 100.0)),
    width: None,
    suffix: "",
};

impl RenderConfig {
    pub const fn width(mut self, width: usize) -> Self {
        self.width = Some(width);
        self
    }

    pub const fn suffix(mut self, suffix: &'static str) -> Self {
        self.suffix = suffix;
        self
    }

    /// As people read it: `decimals` and the suffix, [`NA`] when unknown or
    /// not finite, padded on the left to the width.
    pub fn render(&self, v: Option<f64>) -> String {
        let s = match v {
            Some(v) if v.is_finite() => format!("{}{}", fixed(v, self.decimals), self.suffix),
            _ => NA.to_string(),
        };
        match self.width {
            Some(w) => format!("{s:>w$}"),
            None => s,
        }
    }

    /// As JSON carries it: clamped, rounded, None when unknown.
    pub fn json(&self, v: Option<f64>) -> Option<f64> {
        let v = match self.clamp {
            Some((lo, hi)) => v.map(|x| x.clamp(lo, hi)),
            None => v,
        };
        round_opt(v, self.json_decimals)
    }
}

/// `v` with `decimals` decimals as people read it: never "-0.00" (a
/// figure that rounds to zero is zero, whatever its sign), not finite as
/// [`NA`]. Every figure a text, HTML or TUI view prints goes through here
/// or [`RenderConfig::render`].
pub fn fixed(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return NA.to_string();
    }
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

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
    PERCENT.json(Some(v))
}

/// A percentage as text: one decimal, `n/a` when unknown.
pub fn pct_text(v: Option<f64>) -> String {
    PERCENT.render(v)
}

/// A figure as text, as JSON prints it (`5.0`, `0.125`), `n/a` when unknown.
pub fn num_text(v: Option<f64>) -> String {
    value(&Evidence::from(v))
}

/// A value with up to `digits` decimals, trailing zeros dropped.
pub fn trimmed(v: f64, digits: usize) -> String {
    let s = fixed(v, digits);
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

    #[test]
    fn no_negative_zero() {
        assert_eq!(fixed(-0.0, 2), "0.00");
        assert_eq!(fixed(-0.004, 2), "0.00");
        assert_eq!(fixed(-0.004, 0), "0");
        assert_eq!(fixed(-0.006, 2), "-0.01");
        assert_eq!(fixed(f64::NAN, 1), NA);
        assert_eq!(PERCENT.render(Some(-0.04)), "0.0");
        assert_eq!(PERCENT.width(6).render(Some(-0.0)), "   0.0");
    }

    #[test]
    fn one_config_per_unit() {
        assert_eq!(PERCENT.render(Some(12.345)), "12.3");
        assert_eq!(PERCENT.suffix("%").render(Some(7.0)), "7.0%");
        assert_eq!(PERCENT.suffix("%").render(None), "n/a");
        assert_eq!(PERCENT.width(6).render(Some(0.04)), "   0.0");
        assert_eq!(PERCENT.width(5).render(Some(f64::NAN)), "  n/a");
        assert_eq!(PERCENT.json(Some(100.4)), Some(100.0));
        assert_eq!(PERCENT.json(Some(12.345_6)), Some(12.35));
        assert_eq!(PERCENT.json(None), None);
    }
}
