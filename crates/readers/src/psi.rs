//! /proc/pressure/cpu (4.20+, CONFIG_PSI). The `full` line exists since 5.13.
//! Hand-parsed: procfs-core requires the `full` line.

use crate::error::{ReadError, Result};
use serde::{Deserialize, Serialize};

pub const CPU_PATH: &str = "/proc/pressure/cpu";

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PressureLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Cumulative stall time, µs.
    pub total_us: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    pub some: PressureLine,
    pub full: Option<PressureLine>,
}

fn parse_line(rest: &str, path: &str, kind: &str) -> Result<PressureLine> {
    let mut line = PressureLine::default();
    let mut seen = 0;
    for tok in rest.split_ascii_whitespace() {
        let (k, v) = tok.split_once('=').ok_or_else(|| {
            ReadError::parse(path, format!("'{kind}': token {tok:?} is not key=value"))
        })?;
        let bad = || ReadError::parse(path, format!("'{kind}': {k}={v:?} is not a number"));
        match k {
            "avg10" => line.avg10 = v.parse().map_err(|_| bad())?,
            "avg60" => line.avg60 = v.parse().map_err(|_| bad())?,
            "avg300" => line.avg300 = v.parse().map_err(|_| bad())?,
            "total" => line.total_us = v.parse().map_err(|_| bad())?,
            _ => continue,
        }
        seen += 1;
    }
    if seen < 4 || !(line.avg10.is_finite() && line.avg60.is_finite() && line.avg300.is_finite()) {
        return Err(ReadError::parse(
            path,
            format!("'{kind}' line lacks avg10/avg60/avg300/total"),
        ));
    }
    Ok(line)
}

pub fn parse(text: &str, path: &str) -> Result<Pressure> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("some", rest)) => some = Some(parse_line(rest, path, "some")?),
            Some(("full", rest)) => full = Some(parse_line(rest, path, "full")?),
            _ => {}
        }
    }
    let some = some.ok_or_else(|| ReadError::parse(path, "no 'some' line"))?;
    Ok(Pressure { some, full })
}

pub fn read(src: &dyn crate::Source, path: &str) -> Result<Option<Pressure>> {
    match src.read_text(path)? {
        None => Ok(None),
        Some(t) => parse(&t, path).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_and_without_full() {
        let p = parse(
            "some avg10=4.13 avg60=2.49 avg300=0.66 total=2324727\n",
            CPU_PATH,
        )
        .unwrap();
        assert_eq!(p.some.total_us, 2324727);
        assert!(p.full.is_none());
        let p = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", CPU_PATH).unwrap();
        assert!(p.full.is_some());
        assert!(parse("some avg10=nan avg60=1 avg300=1 total=1\n", CPU_PATH).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") { let _ = parse(&s, CPU_PATH); }
    }
}
