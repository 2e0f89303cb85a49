//! /proc/cpuinfo flags, through procfs-core's parser.

use crate::error::{ReadError, Result};
use procfs_core::FromBufRead;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

pub const PATH: &str = "/proc/cpuinfo";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    pub processors: usize,
    pub vendor: Option<String>,
    pub model_name: Option<String>,
    /// Flags of the first processor (identical on all in a sane VM).
    pub flags: BTreeSet<String>,
    /// `vmx flags` line (5.8+ with CONFIG_X86_VMX_FEATURE_NAMES), host side.
    pub vmx_flags: Option<BTreeSet<String>>,
}

impl CpuInfo {
    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }
}

pub fn parse(text: &str, path: &str) -> Result<CpuInfo> {
    let info = procfs_core::CpuInfo::from_buf_read(text.as_bytes())
        .map_err(|e| ReadError::parse(path, e))?;
    if info.num_cores() == 0 {
        return Err(ReadError::parse(path, "no processor entries"));
    }
    let set = |s: Option<&str>| {
        s.map(|v| {
            v.split_ascii_whitespace()
                .map(str::to_string)
                .collect::<BTreeSet<_>>()
        })
    };
    Ok(CpuInfo {
        processors: info.num_cores(),
        vendor: info.vendor_id(0).map(str::to_string),
        model_name: info.model_name(0).map(str::to_string),
        flags: set(info.get_field(0, "flags")).unwrap_or_default(),
        vmx_flags: set(info.get_field(0, "vmx flags")),
    })
}

pub fn read(src: &dyn crate::Source) -> Result<Option<CpuInfo>> {
    match src.read_text(PATH)? {
        None => Ok(None),
        Some(t) => parse(&t, PATH).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_vmx() {
        let t = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: fpu pti pcid hypervisor\nvmx flags\t: vnmi ept vpid\n\nprocessor\t: 1\nflags\t\t: fpu pti pcid hypervisor\n\n";
        let c = parse(t, PATH).unwrap();
        assert_eq!(c.processors, 2);
        assert!(c.has("pcid") && c.has("pti") && !c.has("ept"));
        assert!(c.vmx_flags.unwrap().contains("ept"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") { let _ = parse(&s, PATH); }
    }
}
