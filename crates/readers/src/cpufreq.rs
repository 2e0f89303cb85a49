//! Per-CPU cpufreq policy; usually absent in KVM guests (no driver).

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuFreq {
    pub cpu: u32,
    pub governor: Option<String>,
    pub driver: Option<String>,
    pub available_governors: Option<Vec<String>>,
    pub cur_khz: Option<u64>,
}

/// None when the CPU has no cpufreq directory.
pub fn read_cpu(src: &dyn Source, cpu: u32) -> Result<Option<CpuFreq>> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq");
    if src.list(&dir)?.is_none() {
        return Ok(None);
    }
    let v = |n: &str| src.read_value(&format!("{dir}/{n}"));
    let cur_path = format!("{dir}/scaling_cur_freq");
    let cur_khz = match src.read_value(&cur_path)? {
        None => None,
        Some(s) => Some(
            s.parse()
                .map_err(|_| ReadError::parse(&cur_path, format!("{s:?} is not a number")))?,
        ),
    };
    Ok(Some(CpuFreq {
        cpu,
        governor: v("scaling_governor")?,
        driver: v("scaling_driver")?,
        available_governors: v("scaling_available_governors")?
            .map(|s| s.split_ascii_whitespace().map(str::to_string).collect()),
        cur_khz,
    }))
}
