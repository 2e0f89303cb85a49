//! Clocksource in use and available (kernel/time/clocksource.c).

use crate::{Result, Source};
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/sys/devices/system/clocksource/clocksource0";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocksource {
    pub current: Option<String>,
    pub available: Option<Vec<String>>,
}

pub fn read(src: &dyn Source) -> Result<Clocksource> {
    Ok(Clocksource {
        current: src.read_value(&format!("{DIR}/current_clocksource"))?,
        available: src
            .read_value(&format!("{DIR}/available_clocksource"))?
            .map(|s| s.split_ascii_whitespace().map(str::to_string).collect()),
    })
}
