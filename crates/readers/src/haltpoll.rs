//! Guest halt-polling parameters (Documentation/virt/guest-halt-polling.rst):
//! governor params in /sys/module/haltpoll, driver `force` in cpuidle_haltpoll.
//! Present only where the kernel has them (5.4+, CONFIG_HALTPOLL_CPUIDLE).

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

pub const GOVERNOR_PARAMS: &str = "/sys/module/haltpoll/parameters";
pub const DRIVER_PARAMS: &str = "/sys/module/cpuidle_haltpoll/parameters";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltpollParams {
    /// The governor module is present (built in or loaded).
    pub governor_present: bool,
    /// The driver module is present (built in or loaded).
    pub driver_present: bool,
    pub guest_halt_poll_ns: Option<u64>,
    pub guest_halt_poll_shrink: Option<u64>,
    pub guest_halt_poll_grow: Option<u64>,
    pub guest_halt_poll_grow_start: Option<u64>,
    pub guest_halt_poll_allow_shrink: Option<bool>,
    pub force: Option<bool>,
}

/// A bool module parameter: Y/N (param_get_bool), 1/0 accepted.
pub(crate) fn yn(path: &str, v: Option<String>) -> Result<Option<bool>> {
    match v.as_deref() {
        None => Ok(None),
        Some("Y") | Some("1") => Ok(Some(true)),
        Some("N") | Some("0") => Ok(Some(false)),
        Some(o) => Err(ReadError::parse(path, format!("{o:?} is not Y or N"))),
    }
}

pub fn read(src: &dyn Source) -> Result<HaltpollParams> {
    let gov = src.list(GOVERNOR_PARAMS)?;
    let drv = src.list(DRIVER_PARAMS)?;
    let num = |n: &str| -> Result<Option<u64>> {
        let path = format!("{GOVERNOR_PARAMS}/{n}");
        match src.read_value(&path)? {
            None => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| ReadError::parse(&path, format!("{s:?} is not a number"))),
        }
    };
    let shrink_path = format!("{GOVERNOR_PARAMS}/guest_halt_poll_allow_shrink");
    let force_path = format!("{DRIVER_PARAMS}/force");
    Ok(HaltpollParams {
        governor_present: gov.is_some(),
        driver_present: drv.is_some(),
        guest_halt_poll_ns: num("guest_halt_poll_ns")?,
        guest_halt_poll_shrink: num("guest_halt_poll_shrink")?,
        guest_halt_poll_grow: num("guest_halt_poll_grow")?,
        guest_halt_poll_grow_start: num("guest_halt_poll_grow_start")?,
        guest_halt_poll_allow_shrink: yn(&shrink_path, src.read_value(&shrink_path)?)?,
        force: yn(&force_path, src.read_value(&force_path)?)?,
    })
}
