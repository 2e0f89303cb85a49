//! Kernel cpulist format (`%*pbl`): "0-3,8,10-11", empty for none.

use crate::error::{ReadError, Result};

/// Highest CPU number we accept; guards against "0-4294967295" eating memory.
const MAX_CPU: u32 = 1 << 16;

pub fn parse(text: &str, path: &str) -> Result<Vec<u32>> {
    let text = text.trim();
    let mut out = Vec::new();
    // Some kernels print "(null)" for an unset nohz_full mask.
    if text.is_empty() || text == "(null)" {
        return Ok(out);
    }
    for part in text.split(',') {
        let bad = || ReadError::parse(path, format!("{part:?} is not a CPU number or range"));
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (
                a.parse::<u32>().map_err(|_| bad())?,
                b.parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let v = part.parse::<u32>().map_err(|_| bad())?;
                (v, v)
            }
        };
        if lo > hi || hi > MAX_CPU {
            return Err(bad());
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

pub fn read(src: &dyn crate::Source, path: &str) -> Result<Option<Vec<u32>>> {
    match src.read_text(path)? {
        None => Ok(None),
        Some(t) => parse(&t, path).map(Some),
    }
}

/// Formats CPUs back into the kernel's compact form.
pub fn format(cpus: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v = parse("0-3,8,10-11\n", "x").unwrap();
        assert_eq!(v, vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(format(&v), "0-3,8,10-11");
        assert!(parse("", "x").unwrap().is_empty());
        assert!(parse("(null)\n", "x").unwrap().is_empty());
        assert!(parse("3-1", "x").is_err());
        assert!(parse("0-99999999", "x").is_err());
        assert!(parse("a", "x").unwrap_err().to_string().starts_with("x:"));
    }

    proptest::proptest! {
        #[test]
        fn format_parse_identity(mut v in proptest::collection::vec(0u32..512, 0..40)) {
            v.sort_unstable(); v.dedup();
            proptest::prop_assert_eq!(parse(&format(&v), "x").unwrap(), v);
        }
        #[test]
        fn never_panics(s in "\\PC{0,40}") { let _ = parse(&s, "x"); }
    }
}
