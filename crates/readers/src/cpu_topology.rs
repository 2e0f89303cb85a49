//! /sys/devices/system/cpu: which CPUs exist, are online, isolated, nohz_full.

use crate::{cpulist, Result, Source};
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/sys/devices/system/cpu";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSets {
    pub online: Option<Vec<u32>>,
    pub possible: Option<Vec<u32>>,
    pub present: Option<Vec<u32>>,
    pub offline: Option<Vec<u32>>,
    pub isolated: Option<Vec<u32>>,
    /// Absent without CONFIG_NO_HZ_FULL.
    pub nohz_full: Option<Vec<u32>>,
}

pub fn read(src: &dyn Source) -> Result<CpuSets> {
    let f = |name: &str| cpulist::read(src, &format!("{DIR}/{name}"));
    Ok(CpuSets {
        online: f("online")?,
        possible: f("possible")?,
        present: f("present")?,
        offline: f("offline")?,
        isolated: f("isolated")?,
        nohz_full: f("nohz_full")?,
    })
}
