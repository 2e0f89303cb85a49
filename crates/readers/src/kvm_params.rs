//! KVM module parameters that decide how guests' memory is virtualised:
//! kvm_intel `ept` and kvm_amd `npt` (bool parameters, 0444, printed Y/N).
//! KVM turns them off itself when the CPU lacks the feature, and an admin can
//! turn them off (`kvm_intel.ept=0`); either way guests then run on shadow
//! paging. Absent when the module is not loaded.

use crate::error::Result;
use crate::haltpoll::yn;
use crate::Source;
use serde::{Deserialize, Serialize};

pub const EPT: &str = "/sys/module/kvm_intel/parameters/ept";
pub const NPT: &str = "/sys/module/kvm_amd/parameters/npt";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmParams {
    pub ept: Option<bool>,
    pub npt: Option<bool>,
}

pub fn read(src: &dyn Source) -> Result<KvmParams> {
    Ok(KvmParams {
        ept: yn(EPT, src.read_value(EPT)?)?,
        npt: yn(NPT, src.read_value(NPT)?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemFs;

    #[test]
    fn y_n_1_0_absent_and_garbage() {
        let fs = MemFs::new("t").with(EPT, "N\n").with(NPT, "1\n");
        assert_eq!(
            read(&fs).unwrap(),
            KvmParams {
                ept: Some(false),
                npt: Some(true)
            }
        );
        assert_eq!(read(&MemFs::new("t")).unwrap(), KvmParams::default());
        let e = read(&MemFs::new("t").with(EPT, "maybe\n")).unwrap_err();
        assert!(e.to_string().starts_with(EPT), "{e}");
    }
}
