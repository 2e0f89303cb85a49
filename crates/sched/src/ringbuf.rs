//! The kernel ring buffer's binary page, as `per_cpu/cpuN/trace_pipe_raw`
//! hands it out (kernel/trace/ring_buffer.c, checked against 6.x):
//!
//! - Page header (offsets from `events/header_page`): `timestamp` (u64, the
//!   time of the page's first event), `commit` (a long: bytes of event data,
//!   plus RB_MISSED_EVENTS (bit 31) when events were lost before this page
//!   and RB_MISSED_STORED (bit 30) when their count is stored as a long right
//!   after the data), then `data`.
//! - Each event starts with a 32-bit word: `type_len` (low 5 bits) and
//!   `time_delta` (27 bits, ns since the previous event). type_len 1..=28:
//!   data of type_len*4 bytes follows; 0: the next u32 is the length (it
//!   counts itself) and data follows it; 29 PADDING: time_delta 0 ends the
//!   page, else a discarded event whose length is the next u32; 30
//!   TIME_EXTEND: the next u32 holds the delta's bits above 27; 31
//!   TIME_STAMP: an absolute time (low 59 bits, the top ones taken from the
//!   current time). Widths and type numbers come from
//!   `events/header_event`, never from here.

use std::collections::HashMap;

const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
/// Data length bits of `commit` (libtraceevent's COMMIT_MASK).
const COMMIT_MASK: u64 = (1 << 27) - 1;
/// Bits an absolute time stamp keeps (ring_buffer.c TS_MSB).
const TS_MSB: u64 = 0xf8 << 56;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageFormat {
    ts_off: usize,
    ts_size: usize,
    commit_off: usize,
    commit_size: usize,
    data_off: usize,
    /// Whole page (header and data) in bytes.
    pub page_size: usize,
    type_len_bits: u32,
    padding: u32,
    time_extend: u32,
    time_stamp: u32,
    data_max: u32,
}

/// Events lost before a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    /// The kernel stored how many.
    Count(u64),
    /// Lost, count not stored (no room on the page).
    Some,
}

/// `field: TYPE NAME; offset:N; size:N; ...` lines -> name -> (offset, size).
fn header_fields(text: &str) -> HashMap<String, (usize, usize)> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let Some(decl) = parts.next() else { continue };
        let Some(name) = decl.split_whitespace().last() else {
            continue;
        };
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        if let (Some(o), Some(s)) = (offset, size) {
            // "int overwrite" shares commit's offset; the first name wins.
            out.entry(name.to_string()).or_insert((o, s));
        }
    }
    out
}

/// `type_len : 5 bits`, `padding : type == 29`, `data max type_len == 28`:
/// the first number after the key.
fn header_number(text: &str, key: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix(key)?;
        if !rest.starts_with([' ', '\t', ':', '=']) {
            return None;
        }
        rest.split(|c: char| !c.is_ascii_digit())
            .find(|t| !t.is_empty())?
            .parse()
            .ok()
    })
}

impl PageFormat {
    /// From the text of `events/header_page` and `events/header_event`.
    pub fn parse(header_page: &str, header_event: &str) -> Result<PageFormat, String> {
        let f = header_fields(header_page);
        let get = |n: &str| {
            f.get(n)
                .copied()
                .ok_or_else(|| format!("events/header_page: no field {n}"))
        };
        let (ts_off, ts_size) = get("timestamp")?;
        let (commit_off, commit_size) = get("commit")?;
        let (data_off, data_size) = get("data")?;
        let num = |k: &str| {
            header_number(header_event, k).ok_or_else(|| format!("events/header_event: no {k}"))
        };
        let type_len_bits = num("type_len")?;
        let delta_bits = num("time_delta")?;
        let pf = PageFormat {
            ts_off,
            ts_size,
            commit_off,
            commit_size,
            data_off,
            page_size: data_off + data_size,
            type_len_bits,
            padding: num("padding")?,
            time_extend: num("time_extend")?,
            time_stamp: num("time_stamp")?,
            data_max: num("data max type_len")?,
        };
        if type_len_bits + delta_bits != 32 || ![4, 8].contains(&commit_size) || ts_size != 8 {
            return Err(format!(
                "events/header_page: unexpected layout (type_len {type_len_bits} + delta \
                 {delta_bits} bits, commit {commit_size} bytes, timestamp {ts_size} bytes)"
            ));
        }
        Ok(pf)
    }

    /// Decodes one page: `record(ts, data)` for each data event in order.
    /// The error says what was wrong and where.
    pub fn decode(
        &self,
        page: &[u8],
        mut record: impl FnMut(u64, &[u8]),
    ) -> Result<Missed, String> {
        let hdr_end = self.data_off;
        if page.len() < hdr_end {
            return Err(format!("short page ({} bytes)", page.len()));
        }
        let mut ts = uint(page, self.ts_off, self.ts_size).unwrap_or(0);
        let commit = uint(page, self.commit_off, self.commit_size).unwrap_or(0);
        let len = (commit & COMMIT_MASK) as usize;
        let end = self.data_off + len;
        if end > page.len() {
            return Err(format!("commit {len} past the page ({} bytes)", page.len()));
        }
        let missed = if commit & MISSED_EVENTS == 0 {
            Missed::None
        } else if commit & MISSED_STORED != 0 {
            match uint(page, end, self.commit_size) {
                Some(n) => Missed::Count(n),
                None => Missed::Some,
            }
        } else {
            Missed::Some
        };
        let shift = self.type_len_bits;
        let mut pos = self.data_off;
        while pos + 4 <= end {
            let word = u32::from_ne_bytes(page[pos..pos + 4].try_into().unwrap());
            let type_len = word & ((1 << shift) - 1);
            let delta = u64::from(word >> shift);
            let arg = || {
                uint(page, pos + 4, 4)
                    .filter(|_| pos + 8 <= end)
                    .ok_or_else(|| format!("event at {pos} cut off"))
            };
            if type_len == self.padding {
                if delta == 0 {
                    break;
                }
                pos += 4 + arg()? as usize;
            } else if type_len == self.time_extend {
                ts += (arg()? << shift_delta(shift)) + delta;
                pos += 8;
            } else if type_len == self.time_stamp {
                ts = fix_abs_ts((arg()? << shift_delta(shift)) + delta, ts);
                pos += 8;
            } else if type_len == 0 {
                let n = arg()? as usize;
                if n < 4 || pos + 4 + n > end {
                    return Err(format!("event at {pos}: length {n} past the data"));
                }
                ts += delta;
                record(ts, &page[pos + 8..pos + 4 + n]);
                pos += 4 + n;
            } else if type_len <= self.data_max {
                let n = type_len as usize * 4;
                if pos + 4 + n > end {
                    return Err(format!("event at {pos}: length {n} past the data"));
                }
                ts += delta;
                record(ts, &page[pos + 4..pos + 4 + n]);
                pos += 4 + n;
            } else {
                return Err(format!("event at {pos}: unknown type_len {type_len}"));
            }
        }
        Ok(missed)
    }
}

/// TIME_EXTEND and TIME_STAMP hold the bits above time_delta's.
fn shift_delta(type_len_bits: u32) -> u32 {
    32 - type_len_bits
}

/// An absolute stamp lost its top 5 bits: take them from the current time.
fn fix_abs_ts(abs: u64, current: u64) -> u64 {
    if current & TS_MSB == 0 {
        return abs;
    }
    let mut t = abs | (current & TS_MSB);
    if t < current {
        t += 1 << 59;
    }
    t
}

/// Native-endian unsigned integer of 1, 2, 4 or 8 bytes at `off`.
pub fn uint(b: &[u8], off: usize, size: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(size)?)?;
    Some(match size {
        1 => u64::from(s[0]),
        2 => u64::from(u16::from_ne_bytes(s.try_into().ok()?)),
        4 => u64::from(u32::from_ne_bytes(s.try_into().ok()?)),
        8 => u64::from_ne_bytes(s.try_into().ok()?),
        _ => return None,
    })
}

#[cfg(test)]
#[path = "ringbuf_tests.rs"]
mod tests;
