//! Dirty page writeback limits (/proc/sys/vm/dirty_*). A non-zero *_bytes
//! overrides the matching *_ratio (mm/page-writeback.c).

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirtySettings {
    pub dirty_ratio: Option<u64>,
    pub dirty_background_ratio: Option<u64>,
    pub dirty_bytes: Option<u64>,
    pub dirty_background_bytes: Option<u64>,
    pub dirty_expire_centisecs: Option<u64>,
    pub dirty_writeback_centisecs: Option<u64>,
}

pub fn read(src: &dyn Source) -> Result<DirtySettings> {
    let num = |n: &str| -> Result<Option<u64>> {
        let path = format!("/proc/sys/vm/{n}");
        match src.read_value(&path)? {
            None => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| ReadError::parse(&path, format!("{s:?} is not a number"))),
        }
    };
    Ok(DirtySettings {
        dirty_ratio: num("dirty_ratio")?,
        dirty_background_ratio: num("dirty_background_ratio")?,
        dirty_bytes: num("dirty_bytes")?,
        dirty_background_bytes: num("dirty_background_bytes")?,
        dirty_expire_centisecs: num("dirty_expire_centisecs")?,
        dirty_writeback_centisecs: num("dirty_writeback_centisecs")?,
    })
}
