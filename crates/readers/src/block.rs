//! Block queue settings per disk (block/elevator.c elv_iosched_show prints
//! "[none] mq-deadline kyber", single-queue kernels "noop [deadline] cfq").

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

pub const DIR: &str = "/sys/block";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockQueue {
    pub device: String,
    /// The bracketed scheduler; "none" when the line is just "none".
    pub scheduler: Option<String>,
    pub available: Vec<String>,
    pub rotational: Option<bool>,
}

pub fn parse_scheduler(text: &str, path: &str) -> Result<(Option<String>, Vec<String>)> {
    let mut selected = None;
    let mut available = Vec::new();
    for tok in text.split_ascii_whitespace() {
        if let Some(inner) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if selected.is_some() {
                return Err(ReadError::parse(path, "two schedulers marked as selected"));
            }
            selected = Some(inner.to_string());
            available.push(inner.to_string());
        } else {
            available.push(tok.to_string());
        }
    }
    if selected.is_none() && available.len() == 1 {
        selected = available.first().cloned();
    }
    Ok((selected, available))
}

pub fn read(src: &dyn Source) -> Result<Vec<BlockQueue>> {
    let mut out = Vec::new();
    for dev in src.list(DIR)?.unwrap_or_default() {
        let sched_path = format!("{DIR}/{dev}/queue/scheduler");
        let Some(text) = src.read_value(&sched_path)? else {
            continue;
        };
        let (scheduler, available) = parse_scheduler(&text, &sched_path)?;
        let rotational = src
            .read_value(&format!("{DIR}/{dev}/queue/rotational"))?
            .map(|v| v == "1");
        out.push(BlockQueue {
            device: dev,
            scheduler,
            available,
            rotational,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedulers() {
        assert_eq!(
            parse_scheduler("none [mq-deadline] kyber bfq", "p")
                .unwrap()
                .0
                .as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(
            parse_scheduler("noop [deadline] cfq", "p")
                .unwrap()
                .0
                .as_deref(),
            Some("deadline")
        );
        assert_eq!(
            parse_scheduler("none", "p").unwrap().0.as_deref(),
            Some("none")
        );
        assert!(parse_scheduler("[a] [b]", "p").is_err());
    }
}
