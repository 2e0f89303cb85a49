//! Kernel log as read from /dev/kmsg: one record per line,
//! "prio,seq,usec,flags[,...];message" (Documentation/ABI/testing/dev-kmsg).
//! Continuation lines (" KEY=value") are dropped.

use serde::{Deserialize, Serialize};

pub const PATH: &str = "/dev/kmsg";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KmsgRecord {
    pub seq: Option<u64>,
    pub usec: Option<u64>,
    pub message: String,
}

/// Lenient by design: the log is evidence, not a source of numbers, so a
/// malformed record is skipped rather than failing the report. Also accepts
/// plain `dmesg` text lines (no ';' header), kept whole.
pub fn parse(text: &str) -> Vec<KmsgRecord> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with(' ') || line.is_empty() {
            continue;
        }
        match line.split_once(';') {
            Some((head, msg))
                if head.split(',').count() >= 3 && head.split(',').all(|f| !f.contains(' ')) =>
            {
                let mut f = head.split(',');
                let _prio = f.next();
                let seq = f.next().and_then(|v| v.parse().ok());
                let usec = f.next().and_then(|v| v.parse().ok());
                out.push(KmsgRecord {
                    seq,
                    usec,
                    message: msg.to_string(),
                });
            }
            _ => out.push(KmsgRecord {
                seq: None,
                usec: None,
                message: line.to_string(),
            }),
        }
    }
    out
}

pub fn read(src: &dyn crate::Source) -> crate::Result<Option<Vec<KmsgRecord>>> {
    // The log may hold non-UTF-8 bytes from drivers; decode lossily.
    Ok(src.read(PATH)?.map(|b| parse(&String::from_utf8_lossy(&b))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records() {
        let r = parse("6,12,0,-;Hypervisor detected: KVM\n SUBSYSTEM=x\n4,13,370686,-;clocksource: Switched to clocksource tsc\n");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].message, "Hypervisor detected: KVM");
        assert_eq!(r[1].usec, Some(370686));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") { let _ = parse(&s); }
    }
}
