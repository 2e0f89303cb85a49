//! Kernel log as read from /dev/kmsg: one record per line,
//! "prio,seq,usec,flags[,...];message" (Documentation/ABI/testing/dev-kmsg).
//! Continuation lines (" KEY=value") are dropped.

use serde::{Deserialize, Serialize};

pub const PATH: &str = "/dev/kmsg";

/// The kernel messages a snapshot keeps, by what they contain, and who reads
/// them: every other message is dropped at capture (a snapshot is sent to
/// colleagues; the log holds host names, devices, users' programs). A rule
/// that looks for another message must add it here (debug builds check).
pub const RULE_MARKERS: &[(&str, &str)] = &[
    ("Hypervisor detected", "roles: is this machine a guest"),
    ("Performance Events:", "hardware notes: why no PMU"),
    ("does not support poll control", "idle.haltpoll-inactive"),
    ("Marking TSC unstable", "clock.unstable"),
    (
        "as unstable because the skew is too large",
        "clock.unstable",
    ),
    ("Marking clocksource", "clock.unstable"),
    ("page tables isolation", "mitigation.kpti-without-pcid"),
];

/// Whether a message is one some rule reads.
pub fn read_by_rules(message: &str) -> bool {
    markers().is_match(message)
}

/// All the markers in one automaton: one pass over a message instead of a
/// substring search per marker (the log has hundreds of records).
fn markers() -> &'static aho_corasick::AhoCorasick {
    static M: std::sync::OnceLock<aho_corasick::AhoCorasick> = std::sync::OnceLock::new();
    // The crate's own choice of automaton (a DFA for so few patterns): a
    // contiguous NFA builds in a quarter of the time but searches at half
    // the speed, about even over two checkpoints' log (callgrind).
    M.get_or_init(|| {
        aho_corasick::AhoCorasick::new(RULE_MARKERS.iter().map(|(m, _)| m))
            .expect("a handful of short literal markers build an automaton")
    })
}

/// The raw log with only the records some rule reads (continuation lines
/// dropped too).
pub fn keep_rule_records(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    // Byte lines: a marker is ASCII, so a record that holds one holds it
    // whatever bytes a driver put around it, and is kept as it was.
    for line in raw.split(|&b| b == b'\n') {
        let msg = match line.iter().position(|&b| b == b';') {
            Some(i) => &line[i + 1..],
            None => line,
        };
        if !line.is_empty() && line[0] != b' ' && markers().is_match(msg) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

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
    fn keeps_only_what_rules_read() {
        let raw = b"6,1,0,-;Hypervisor detected: KVM\n SUBSYSTEM=x\n6,2,5,-;systemd[1]: Hostname set to <db7>.\n4,3,9,-;clocksource: Marking clocksource 'tsc' as unstable\n";
        let kept = String::from_utf8(keep_rule_records(raw)).unwrap();
        assert_eq!(
            kept,
            "6,1,0,-;Hypervisor detected: KVM\n4,3,9,-;clocksource: Marking clocksource 'tsc' as unstable\n"
        );
    }

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
