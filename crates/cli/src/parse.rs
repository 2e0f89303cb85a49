//! Values of flags that several subcommands share (durations, rates): a
//! leaf module, so that each subcommand's arguments and the command tree
//! (args.rs) both use it without using each other.

use std::time::Duration;

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(v) = s.strip_suffix("ms") {
        (v, 0.001)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('m') {
        (v, 60.0)
    } else if let Some(v) = s.strip_suffix('h') {
        (v, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 5s, 500ms or 2m"))?;
    let secs = v * mult;
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "{s:?}: a duration must be longer than 0 and at most 24h (e.g. 500ms, 5s, 2m)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if !(0.0..=1000.0).contains(&v) {
        return Err("rate must be between 0 and 1000 Hz".into());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_bounds_are_the_ones_enforced() {
        let e = parse_duration("0").unwrap_err();
        assert!(e.contains("longer than 0 and at most 24h"), "{e}");
        assert!(parse_duration("24h").is_ok());
        assert!(parse_duration("1ms").is_ok());
        assert!(parse_duration("24.1h").unwrap_err().contains("at most 24h"));
    }
}
