//! cpuidle sysfs (drivers/cpuidle/sysfs.c): the driver and governor, and per
//! CPU the idle states with exit latency and cumulative usage and time.

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/sys/devices/system/cpu/cpuidle";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidleGlobal {
    /// "none" when no driver is registered.
    pub current_driver: Option<String>,
    pub current_governor: Option<String>,
    pub current_governor_ro: Option<String>,
    pub available_governors: Option<Vec<String>>,
}

impl CpuidleGlobal {
    pub fn governor(&self) -> Option<&str> {
        self.current_governor
            .as_deref()
            .or(self.current_governor_ro.as_deref())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleState {
    pub index: u32,
    pub name: Option<String>,
    pub desc: Option<String>,
    /// Exit latency, µs.
    pub latency_us: Option<u64>,
    pub residency_us: Option<u64>,
    pub usage: Option<u64>,
    /// Cumulative time in the state, µs.
    pub time_us: Option<u64>,
    pub disabled: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuIdleStates {
    pub cpu: u32,
    pub states: Vec<IdleState>,
}

pub fn read_global(src: &dyn Source) -> Result<CpuidleGlobal> {
    let v = |n: &str| src.read_value(&format!("{DIR}/{n}"));
    Ok(CpuidleGlobal {
        current_driver: v("current_driver")?,
        current_governor: v("current_governor")?,
        current_governor_ro: v("current_governor_ro")?,
        available_governors: v("available_governors")?
            .map(|s| s.split_ascii_whitespace().map(str::to_string).collect()),
    })
}

fn num(src: &dyn Source, path: &str) -> Result<Option<u64>> {
    match src.read_value(path)? {
        None => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ReadError::parse(path, format!("{s:?} is not a number"))),
    }
}

/// States of one CPU; empty when the CPU has no cpuidle directory.
pub fn read_cpu(src: &dyn Source, cpu: u32) -> Result<CpuIdleStates> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
    let mut states = Vec::new();
    for name in src.list(&dir)?.unwrap_or_default() {
        let Some(index) = name
            .strip_prefix("state")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let p = |f: &str| format!("{dir}/{name}/{f}");
        states.push(IdleState {
            index,
            name: src.read_value(&p("name"))?,
            desc: src.read_value(&p("desc"))?,
            latency_us: num(src, &p("latency"))?,
            residency_us: num(src, &p("residency"))?,
            usage: num(src, &p("usage"))?,
            time_us: num(src, &p("time"))?,
            disabled: num(src, &p("disable"))?.map(|v| v != 0),
        });
    }
    states.sort_by_key(|s| s.index);
    Ok(CpuIdleStates { cpu, states })
}
