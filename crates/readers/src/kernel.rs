//! Small kernel facts: release, command line, uptime, memory, PM QoS.

use crate::error::{ReadError, Result};
use crate::Source;
use procfs_core::FromBufRead;
use serde::{Deserialize, Serialize};

pub const OSRELEASE: &str = "/proc/sys/kernel/osrelease";
pub const CMDLINE: &str = "/proc/cmdline";
pub const UPTIME: &str = "/proc/uptime";
pub const MEMINFO: &str = "/proc/meminfo";
pub const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

pub fn osrelease(src: &dyn Source) -> Result<Option<String>> {
    src.read_value(OSRELEASE)
}

/// The kernel parameters some rule reads (`Observation::cmdline_has`, checked
/// in debug builds): all a redacted snapshot keeps of /proc/cmdline.
pub const RULE_PARAMS: &[&str] = &["cpuidle_haltpoll.force", "haltpoll.guest_halt_poll_ns"];

/// Kernel command line split into parameters (quotes respected).
pub fn cmdline(src: &dyn Source) -> Result<Option<Vec<String>>> {
    Ok(src.read_value(CMDLINE)?.map(|s| split_cmdline(&s)))
}

pub fn split_cmdline(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in s.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Seconds since boot from /proc/uptime (first field, centisecond resolution).
pub fn uptime(src: &dyn Source) -> Result<Option<f64>> {
    let Some(s) = src.read_value(UPTIME)? else {
        return Ok(None);
    };
    let first = s.split_ascii_whitespace().next().unwrap_or("");
    match first.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
        _ => Err(ReadError::parse(
            UPTIME,
            format!("{first:?} is not a number of seconds"),
        )),
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub total_bytes: u64,
    pub available_bytes: Option<u64>,
    pub swap_total_bytes: Option<u64>,
    pub swap_free_bytes: Option<u64>,
}

pub fn meminfo(src: &dyn Source) -> Result<Option<Memory>> {
    let Some(text) = src.read_text(MEMINFO)? else {
        return Ok(None);
    };
    let m = procfs_core::Meminfo::from_buf_read(text.as_bytes())
        .map_err(|e| ReadError::parse(MEMINFO, e))?;
    Ok(Some(Memory {
        total_bytes: m.mem_total,
        available_bytes: m.mem_available,
        swap_total_bytes: Some(m.swap_total),
        swap_free_bytes: Some(m.swap_free),
    }))
}

/// Effective CPU latency PM QoS limit in µs: /dev/cpu_dma_latency read gives
/// the current minimum as a binary s32 (kernel/power/qos.c).
pub fn pm_qos_cpu_latency_us(src: &dyn Source) -> Result<Option<i32>> {
    let Some(b) = src.read(CPU_DMA_LATENCY)? else {
        return Ok(None);
    };
    let arr: [u8; 4] = b.get(..4).and_then(|s| s.try_into().ok()).ok_or_else(|| {
        ReadError::parse(
            CPU_DMA_LATENCY,
            format!("{} bytes, expected a 4-byte value", b.len()),
        )
    })?;
    Ok(Some(i32::from_ne_bytes(arr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_quotes() {
        assert_eq!(split_cmdline("a=1  b=\"x y\" c"), vec!["a=1", "b=x y", "c"]);
    }
}
