//! /sys/devices/system/cpu/vulnerabilities/* (arch/x86/kernel/cpu/bugs.c).

use crate::{Result, Source};
use std::collections::BTreeMap;

pub const DIR: &str = "/sys/devices/system/cpu/vulnerabilities";

/// Every vulnerability file by name ("meltdown" -> "Mitigation: PTI").
/// None when the directory does not exist (kernels before the 2018 backports).
pub fn read(src: &dyn Source) -> Result<Option<BTreeMap<String, String>>> {
    let Some(names) = src.list(DIR)? else {
        return Ok(None);
    };
    let mut out = BTreeMap::new();
    for name in names {
        if let Some(v) = src.read_value(&format!("{DIR}/{name}"))? {
            out.insert(name, v);
        }
    }
    Ok(Some(out))
}
