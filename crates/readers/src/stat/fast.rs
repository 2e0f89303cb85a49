//! The sampler's /proc/stat parse: the cpu rows straight from the bytes
//! pread returned, for the file as the kernel prints it (`cpu` and `cpuN`
//! keys, numbers split by spaces). Anything else (a tab, a blank line, an
//! error to name) is left to [`super::parse_into`], so what is accepted and
//! every error message stay that parser's.

use super::{cpu_block_end, parse_into, CpuRow, CpuTimes, ProcStat};
use crate::error::{ReadError, Result};

/// The cpu rows of `bytes` into `out`, as `parse_into(text, path, true,
/// out)` would.
pub fn parse_cpu_rows(bytes: &[u8], path: &str, out: &mut ProcStat) -> Result<()> {
    if fast(bytes, out).is_some() {
        return Ok(());
    }
    let text = std::str::from_utf8(&bytes[..cpu_block_end(bytes)])
        .map_err(|_| ReadError::parse(path, "not text"))?;
    parse_into(text, path, true, out)
}

/// None: not the plain form; `out` is then rewritten by the full parser.
fn fast(bytes: &[u8], out: &mut ProcStat) -> Option<()> {
    *out = ProcStat {
        cpus: std::mem::take(&mut out.cpus),
        ..ProcStat::default()
    };
    out.cpus.clear();
    let mut pos = 0;
    let mut expected = 0;
    loop {
        let line = bytes.get(pos..)?;
        if !line.starts_with(b"cpu") {
            // The first other line ends the block (its key must be text,
            // as the full parser reads it); an empty one that parser
            // skips, so it decides.
            let key = line.iter().take_while(|&&b| b != b' ' && b != b'\n');
            let plain = !line.is_empty() && line[0] != b'\n' && key.clone().all(u8::is_ascii);
            return (plain && out.total.is_some()).then_some(());
        }
        let mut i = 3;
        let (cpu, digits) = number(line, &mut i)?;
        if line.get(i) != Some(&b' ') {
            return None;
        }
        let mut cols = [0u64; 10];
        let mut n = 0;
        loop {
            while line.get(i) == Some(&b' ') {
                i += 1;
            }
            match line.get(i)? {
                b'\n' => break,
                b'0'..=b'9' if n < cols.len() => {
                    cols[n] = number(line, &mut i)?.0;
                    n += 1;
                }
                _ => return None,
            }
        }
        pos += i + 1;
        if n < 4 {
            return None;
        }
        let times = CpuTimes::from_columns(&cols[..n]);
        if digits == 0 {
            if out.total.is_some() {
                return None;
            }
            expected = n;
            out.total = Some(times);
            continue;
        }
        let cpu = u32::try_from(cpu).ok()?;
        let in_order = out.cpus.last().is_none_or(|r| r.cpu < Some(cpu));
        if out.total.is_none() || n != expected || !in_order {
            return None;
        }
        out.cpus.push(CpuRow {
            cpu: Some(cpu),
            times,
        });
    }
}

/// The decimal number at `*i` (and how many digits), None on overflow.
fn number(line: &[u8], i: &mut usize) -> Option<(u64, usize)> {
    let start = *i;
    let mut v = 0u64;
    while let Some(d) = line
        .get(*i)
        .map(|b| b.wrapping_sub(b'0'))
        .filter(|&d| d < 10)
    {
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
        *i += 1;
    }
    Some((v, *i - start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow(text: &[u8]) -> std::result::Result<ProcStat, String> {
        let mut out = ProcStat::default();
        let end = cpu_block_end(text);
        let t = std::str::from_utf8(&text[..end])
            .map_err(|_| ReadError::parse("/proc/stat", "not text").to_string())?;
        parse_into(t, "/proc/stat", true, &mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn quick(text: &[u8]) -> std::result::Result<ProcStat, String> {
        // A used ProcStat, to catch rows left from a previous sample.
        let mut out = slow(b"cpu  1 2 3 4\ncpu7 1 2 3 4\nintr 1\n").unwrap();
        parse_cpu_rows(text, "/proc/stat", &mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// Same answer as the full parser on the live file, on hostile forms,
    /// and on every one-byte change of a real file (the fuzz the full
    /// parser's own tests do not need: it is the reference here).
    #[test]
    fn agrees_with_the_full_parser() {
        let live = std::fs::read(super::super::PATH).unwrap();
        let guest = b"cpu  755 0 769 7368 83 0 15 8 0 0\ncpu0 234 0 293 3956 4 0 4 2 0 0\ncpu1 520 0 475 3412 78 0 10 5 0 0\nintr 60652 0 0\nctxt 1\n".to_vec();
        let mut cases: Vec<Vec<u8>> = vec![live.clone(), guest.clone()];
        for s in [
            "cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8 9 10 11 12\nintr 1\n",
            "cpu  1 2 3 4 5 6 7 8 9 10 11\ncpu0 1 2 3 4 5 6 7 8 9 10 11\nintr 1\n",
            "cpu  1 2 3 4\ncpu0 1 2 3 4\ncpu0 1 2 3 4\nintr 1\n",
            "cpu  1 2 3 4\ncpu  1 2 3 4\nintr 1\n",
            "cpu0 1 2 3 4\nintr 1\n",
            "cpu  1 2 3 4\ncpu4294967296 1 2 3 4\nintr 1\n",
            "cpu  1 2 3 4\ncpu01 1 2 3 4\nintr 1\n",
            "cpu  1 2 3 18446744073709551616\nintr 1\n",
            "cpu  1 2 3 4 \ncpu1  1 2 3 4\nintr 1\n",
            "cpu  1 2 3 4\ncpu1 1 2 3 4\r\nintr 1\n",
            "cpu  1 2 3 4\n\nintr 1\n",
            "cpu  1 2 3 4\ncpux 1 2 3 4\nintr 1\n",
            "cpu  1 2 3 4\ncpu1 1 2 3 4",
            "cpu  1 2 3 4\ncpu1 1 2 3 4\n",
            "cpu 1 2 3\nintr 1\n",
            "cpu\nintr 1\n",
            "cpu  1 2 3 4\nintr",
            "",
        ] {
            cases.push(s.as_bytes().to_vec());
        }
        for base in [&live, &guest] {
            let cut = cpu_block_end(base) + 8;
            for at in 0..cut.min(base.len()) {
                for b in [b' ', b'\n', b'\t', b'0', b'9', b'x', 0xff] {
                    let mut m = base.clone();
                    m[at] = b;
                    cases.push(m);
                }
            }
        }
        for c in &cases {
            assert_eq!(quick(c), slow(c), "{:?}", String::from_utf8_lossy(c));
        }
    }
}
