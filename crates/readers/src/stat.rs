//! /proc/stat (fs/proc/stat.c show_stat). Columns in USER_HZ ticks:
//! user nice system idle iowait(2.5.41) irq softirq(2.6.0) steal(2.6.11)
//! guest(2.6.24) guest_nice(2.6.33). Only online CPUs have a `cpuN` row.
//!
//! Hand-written rather than procfs-core's KernelStats: that one drops the CPU
//! number (so an offline CPU shifts every row after it), and this parser is on
//! the 10-1000 Hz sampling path where it must not allocate per row.

use crate::error::{ReadError, Result};
use serde::{Deserialize, Serialize};

mod fast;
pub use fast::parse_cpu_rows;

pub const PATH: &str = "/proc/stat";

/// Cumulative ticks of one CPU row. Columns the kernel did not print are None.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: Option<u64>,
    pub irq: Option<u64>,
    pub softirq: Option<u64>,
    pub steal: Option<u64>,
    /// Already included in `user` (account_guest_time): never add it again.
    pub guest: Option<u64>,
    /// Already included in `nice`.
    pub guest_nice: Option<u64>,
}

impl CpuTimes {
    pub const COLUMNS: [&'static str; 10] = [
        "user",
        "nice",
        "system",
        "idle",
        "iowait",
        "irq",
        "softirq",
        "steal",
        "guest",
        "guest_nice",
    ];

    /// From the first 4..=10 columns in [`CpuTimes::COLUMNS`] order.
    pub(crate) fn from_columns(cols: &[u64]) -> CpuTimes {
        let opt = |i: usize| cols.get(i).copied();
        CpuTimes {
            user: cols[0],
            nice: cols[1],
            system: cols[2],
            idle: cols[3],
            iowait: opt(4),
            irq: opt(5),
            softirq: opt(6),
            steal: opt(7),
            guest: opt(8),
            guest_nice: opt(9),
        }
    }

    /// How many columns the kernel printed (the leading ones that are Some).
    pub fn column_count(&self) -> usize {
        (4..10).find(|&i| self.column(i).is_none()).unwrap_or(10)
    }

    /// Value of a column by index in [`CpuTimes::COLUMNS`] order.
    pub fn column(&self, i: usize) -> Option<u64> {
        match i {
            0 => Some(self.user),
            1 => Some(self.nice),
            2 => Some(self.system),
            3 => Some(self.idle),
            4 => self.iowait,
            5 => self.irq,
            6 => self.softirq,
            7 => self.steal,
            8 => self.guest,
            9 => self.guest_nice,
            _ => None,
        }
    }
}

/// One `cpu`/`cpuN` row. `cpu` is None for the aggregate row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuRow {
    pub cpu: Option<u32>,
    pub times: CpuTimes,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStat {
    pub total: Option<CpuTimes>,
    /// Per-CPU rows in file order (ascending CPU number on every kernel).
    pub cpus: Vec<CpuRow>,
    pub ctxt: Option<u64>,
    pub btime: Option<u64>,
    pub processes: Option<u64>,
    pub procs_running: Option<u64>,
    pub procs_blocked: Option<u64>,
    /// First number of the `intr` line: all interrupts since boot.
    pub intr_total: Option<u64>,
}

impl ProcStat {
    pub fn cpu(&self, cpu: u32) -> Option<&CpuTimes> {
        self.cpus
            .iter()
            .find(|r| r.cpu == Some(cpu))
            .map(|r| &r.times)
    }
}

fn parse_u64(tok: &str) -> Option<u64> {
    // Digits only (u64::from_str would take a leading '+', which the kernel
    // never prints), None on overflow; one pass, on the sampling path.
    if tok.is_empty() {
        return None;
    }
    tok.bytes().try_fold(0u64, |v, b| {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// Where the cpu rows of /proc/stat end, plus the key of the line after
/// them: all that [`parse_into`] reads with `cpu_lines_only`, so a sampler
/// need not check the rest (the long `intr` line) is text.
pub fn cpu_block_end(bytes: &[u8]) -> usize {
    let mut pos = 0;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        if rest[0] == b'\n' {
            pos += 1;
            continue;
        }
        if !rest.starts_with(b"cpu") {
            // At least one byte: a line starting with a space is a
            // (empty) key too, and ends the block.
            let key = rest.iter().position(|&b| b == b' ' || b == b'\n');
            return pos + key.unwrap_or(rest.len()).max(1);
        }
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => pos += i + 1,
            None => return bytes.len(),
        }
    }
    bytes.len()
}

/// Parses one cpu line's numbers into `cols`; returns how many were present.
fn parse_cpu_columns(rest: &str, cols: &mut [u64; 10], path: &str, lineno: usize) -> Result<usize> {
    let mut n = 0;
    for tok in rest.split_ascii_whitespace() {
        if n == cols.len() {
            // Future kernels may add columns; ignore what we do not know.
            break;
        }
        cols[n] = parse_u64(tok).ok_or_else(|| {
            ReadError::parse(
                path,
                format!(
                    "line {lineno}: column '{}' is {tok:?}, expected a number",
                    CpuTimes::COLUMNS[n]
                ),
            )
        })?;
        n += 1;
    }
    if n < 4 {
        return Err(ReadError::parse(
            path,
            format!("line {lineno}: {n} columns, at least 4 expected (user nice system idle)"),
        ));
    }
    Ok(n)
}

/// Parses the CPU rows of /proc/stat into `out`, reusing its allocation.
/// With `cpu_lines_only`, stops after the last cpu row (the sampling fast
/// path: the `intr` line of a big host is thousands of numbers).
pub fn parse_into(text: &str, path: &str, cpu_lines_only: bool, out: &mut ProcStat) -> Result<()> {
    clear(out);
    if text.is_empty() {
        return Err(ReadError::parse(path, "empty file"));
    }
    if !text.ends_with('\n') && !cpu_lines_only {
        return Err(ReadError::parse(
            path,
            "truncated: last line has no newline",
        ));
    }
    let mut rows = CpuRows {
        expected_cols: 0,
        cols: [0u64; 10],
    };
    let mut saw_after_cpu = false;
    for (i, line) in text.split('\n').enumerate() {
        let lineno = i + 1;
        if line.is_empty() {
            continue;
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        if let Some(num) = key.strip_prefix("cpu") {
            if saw_after_cpu {
                return Err(ReadError::parse(
                    path,
                    format!("line {lineno}: cpu row after the cpu block"),
                ));
            }
            rows.push(out, key, num, rest, path, lineno)?;
            continue;
        }
        saw_after_cpu = true;
        if cpu_lines_only {
            break;
        }
        set_counter(out, key, rest, path, lineno)?;
    }
    if out.total.is_none() {
        return Err(ReadError::parse(path, "no 'cpu' row"));
    }
    if cpu_lines_only && !saw_after_cpu {
        return Err(ReadError::parse(
            path,
            "truncated: file ends inside the cpu rows",
        ));
    }
    Ok(())
}

/// Empties `out`, keeping its allocation.
fn clear(out: &mut ProcStat) {
    out.cpus.clear();
    out.total = None;
    out.ctxt = None;
    out.btime = None;
    out.processes = None;
    out.procs_running = None;
    out.procs_blocked = None;
    out.intr_total = None;
}

/// The cpu block's state while it is parsed: the aggregate row's column
/// count (every cpuN row must have as many) and a scratch row.
struct CpuRows {
    expected_cols: usize,
    cols: [u64; 10],
}

impl CpuRows {
    /// One `cpu` or `cpuN` row (`num` is what follows "cpu").
    #[inline]
    fn push(
        &mut self,
        out: &mut ProcStat,
        key: &str,
        num: &str,
        rest: &str,
        path: &str,
        lineno: usize,
    ) -> Result<()> {
        let n = parse_cpu_columns(rest, &mut self.cols, path, lineno)?;
        if num.is_empty() {
            if out.total.is_some() {
                return Err(ReadError::parse(
                    path,
                    format!("line {lineno}: second aggregate 'cpu' row"),
                ));
            }
            self.expected_cols = n;
            out.total = Some(CpuTimes::from_columns(&self.cols[..n]));
            return Ok(());
        }
        let cpu: u32 = parse_u64(num)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                ReadError::parse(path, format!("line {lineno}: bad cpu name {key:?}"))
            })?;
        if out.total.is_none() {
            return Err(ReadError::parse(
                path,
                format!("line {lineno}: {key} before the aggregate 'cpu' row"),
            ));
        }
        if n != self.expected_cols {
            return Err(ReadError::parse(
                path,
                format!(
                    "line {lineno}: {key} has {n} columns but the 'cpu' row has {} (truncated?)",
                    self.expected_cols
                ),
            ));
        }
        if out.cpus.last().is_some_and(|r| r.cpu >= Some(cpu)) {
            return Err(ReadError::parse(
                path,
                format!("line {lineno}: {key} out of order"),
            ));
        }
        out.cpus.push(CpuRow {
            cpu: Some(cpu),
            times: CpuTimes::from_columns(&self.cols[..n]),
        });
        Ok(())
    }
}

/// One counter line after the cpu block (ctxt, btime, ...); other keys
/// (softirq, page, swap and future ones) are skipped.
fn set_counter(out: &mut ProcStat, key: &str, rest: &str, path: &str, lineno: usize) -> Result<()> {
    let slot = match key {
        "ctxt" => &mut out.ctxt,
        "btime" => &mut out.btime,
        "processes" => &mut out.processes,
        "procs_running" => &mut out.procs_running,
        "procs_blocked" => &mut out.procs_blocked,
        "intr" => &mut out.intr_total,
        _ => return Ok(()),
    };
    let value = rest.split_ascii_whitespace().next().and_then(parse_u64);
    if value.is_none() {
        return Err(ReadError::parse(
            path,
            format!("line {lineno}: '{key}' has no number"),
        ));
    }
    *slot = value;
    Ok(())
}

/// The cpu rows as the kernel prints them (`cpu  …` then `cpuN …`): what
/// a snapshot's samples.jsonl holds. Parsing it gives back the same rows.
pub fn render_cpu_lines(s: &ProcStat) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut row = |name: &str, t: &CpuTimes| {
        out.push_str(name);
        for i in 0..t.column_count() {
            let _ = write!(out, " {}", t.column(i).unwrap_or(0));
        }
        out.push('\n');
    };
    if let Some(t) = &s.total {
        row("cpu ", t);
    }
    for r in &s.cpus {
        if let Some(cpu) = r.cpu {
            row(&format!("cpu{cpu}"), &r.times);
        }
    }
    out
}

pub fn parse(text: &str, path: &str) -> Result<ProcStat> {
    let mut out = ProcStat::default();
    parse_into(text, path, false, &mut out)?;
    Ok(out)
}

pub fn read(src: &dyn crate::Source) -> Result<Option<ProcStat>> {
    match src.read_text(PATH)? {
        None => Ok(None),
        Some(text) => parse(&text, PATH).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUEST: &str = "cpu  755 0 769 7368 83 0 15 8 0 0\ncpu0 234 0 293 3956 4 0 4 2 0 0\ncpu1 520 0 475 3412 78 0 10 5 0 0\nintr 60652 0 0\nctxt 150877\nbtime 1790000000\nprocesses 1000\nprocs_running 2\nprocs_blocked 0\nsoftirq 1 2 3\n";

    #[test]
    fn rendered_cpu_lines_are_the_kernel_s() {
        let s = parse(GUEST, PATH).unwrap();
        let text = render_cpu_lines(&s);
        let end = GUEST.find("intr").unwrap();
        assert_eq!(text, &GUEST[..end]);
        let old = parse("cpu  1 2 3 4\ncpu3 1 2 3 4\nintr 0\n", PATH).unwrap();
        assert_eq!(render_cpu_lines(&old), "cpu  1 2 3 4\ncpu3 1 2 3 4\n");
        assert_eq!(old.cpus[0].times.column_count(), 4);
    }

    /// The cpu block alone parses as the whole file does, hostile input
    /// included (the sampler parses only `cpu_block_end`'s prefix).
    #[test]
    fn cpu_block_parses_as_the_whole_file() {
        let live = std::fs::read_to_string(PATH).unwrap();
        let cases = [
            GUEST,
            &live,
            "cpu  1 2 3 4\n\ncpu0 1 2 3 4\n\nintr 9 9\n",
            "cpu  1 2 3 4\n 5 6\ncpu0 1 2 3 4\n",
            "cpu  1 2 3 4\ncpu0 1 2 3\nintr 1\n",
            "cpu  1 2 3 4\ncpu0 1 2 3 4",
            "cpu  1 2 3 4\ncpu0 1 2 3 x\nintr 1\n",
            "cpu  1 2 3 99999999999999999999\nintr\n",
            "cpu  1 2 3 +4\nintr 1\n",
            "cpu  1 2 3 4\nintr",
            "intr 1\ncpu  1 2 3 4\n",
            "",
            "\n",
        ];
        for text in cases {
            let (mut whole, mut cut) = (ProcStat::default(), ProcStat::default());
            let a = parse_into(text, PATH, true, &mut whole).map_err(|e| e.to_string());
            let end = cpu_block_end(text.as_bytes());
            let b = parse_into(&text[..end], PATH, true, &mut cut).map_err(|e| e.to_string());
            assert_eq!(a, b, "{text:?} cut at {end}");
            assert_eq!(whole, cut, "{text:?}");
        }
        assert_eq!(parse_u64("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64("18446744073709551616"), None);
        assert_eq!(parse_u64("12a"), None);
    }

    #[test]
    fn parses_modern_guest() {
        let s = parse(GUEST, PATH).unwrap();
        assert_eq!(s.cpus.len(), 2);
        assert_eq!(s.cpu(1).unwrap().steal, Some(5));
        assert_eq!(s.ctxt, Some(150877));
        assert_eq!(s.intr_total, Some(60652));
        assert_eq!(s.total.unwrap().guest_nice, Some(0));
    }

    #[test]
    fn old_kernel_has_fewer_columns() {
        let s = parse("cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\nintr 1\n", PATH).unwrap();
        let t = s.cpu(0).unwrap();
        assert_eq!(t.softirq, Some(7));
        assert_eq!(t.steal, None);
        assert_eq!(t.guest, None);
    }

    #[test]
    fn offline_cpu_keeps_numbers() {
        let s = parse("cpu  1 1 1 1\ncpu0 1 1 1 1\ncpu2 1 1 1 1\nintr 0\n", PATH).unwrap();
        assert!(s.cpu(1).is_none());
        assert!(s.cpu(2).is_some());
    }

    #[test]
    fn truncated_row_is_an_error_naming_the_file() {
        let err = parse(
            "cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 2 3 4 5 6 7 8 9 10\ncpu1 2 3 4 5\n",
            PATH,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("/proc/stat: line 3"), "{msg}");
        assert!(msg.contains("truncated"), "{msg}");
        let err = parse("cpu  1 2 3 4\ncpu0 1 2", PATH).unwrap_err();
        assert!(err.to_string().contains("newline"));
    }

    #[test]
    fn garbage_and_empty_are_errors() {
        assert!(parse("", PATH).is_err());
        assert!(parse("hello world\n", PATH).is_err());
        assert!(parse("cpu  1 2 x 4\n", PATH)
            .unwrap_err()
            .to_string()
            .contains("'system'"));
        assert!(parse("cpu  +1 2 3 4\n", PATH).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,400}") {
            let _ = parse(&s, PATH);
            let mut out = ProcStat::default();
            let _ = parse_into(&s, PATH, true, &mut out);
        }

        #[test]
        fn never_panics_on_statlike(rows in proptest::collection::vec(("cpu[0-9]{0,2}", proptest::collection::vec(0u64..u64::MAX, 0..13)), 0..6)) {
            let mut s = String::new();
            for (k, cols) in rows {
                s.push_str(&k);
                for c in cols { s.push(' '); s.push_str(&c.to_string()); }
                s.push('\n');
            }
            let _ = parse(&s, PATH);
        }
    }
}
