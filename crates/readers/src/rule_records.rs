//! What a capture keeps of the files the rules read: a source wrapper that
//! trims the two large ones to what their readers parse, so that what is
//! recorded (a snapshot's bytes, and serve's two captures an interval) and
//! parsed is that much. The kernel log keeps the records some rule reads
//! (`kmsg::keep_rule_records`: a snapshot is sent to colleagues, the log
//! holds host names and users' programs); a task's status file keeps the
//! lines `process::parse_status` reads (1.4 KiB a thread otherwise: 28 MiB
//! of serve's heap at 10,000 vCPU threads, measured with heaptrack).

use crate::{kmsg, process};

/// A source whose /dev/kmsg and task status files hold only what the
/// rules read.
pub struct RuleRecords<S>(pub S);

impl<S: crate::Source> crate::Source for RuleRecords<S> {
    fn read(&self, path: &str) -> crate::Result<Option<Vec<u8>>> {
        let data = self.0.read(path)?;
        Ok(if path == kmsg::PATH {
            data.map(|d| kmsg::keep_rule_records(&d))
        } else if process::is_task_status(path) {
            data.map(|d| process::keep_status_lines(&d))
        } else {
            data
        })
    }

    fn list(&self, dir: &str) -> crate::Result<Option<Vec<String>>> {
        self.0.list(dir)
    }

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn now_ns(&self) -> Option<u64> {
        self.0.now_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kmsg::{keep_rule_records, parse, read_by_rules, PATH, RULE_MARKERS};

    #[test]
    fn a_source_s_log_holds_only_the_kept_records() {
        use crate::{MemFs, Source};
        let raw = b"6,1,0,-;Hypervisor detected: KVM\n6,2,5,-;usb \xff\xfe plugged\n4,3,9,-;x86/PTI: page tables isolation: enabled \xff\n";
        let src = RuleRecords(MemFs::new("t").with(PATH, raw).with("/proc/x", "1\n"));
        let kept = src.read(PATH).unwrap().unwrap();
        assert_eq!(kept, keep_rule_records(raw));
        // A kept record keeps its bytes; the dropped one is gone.
        assert_eq!(
            kept,
            b"6,1,0,-;Hypervisor detected: KVM\n4,3,9,-;x86/PTI: page tables isolation: enabled \xff\n"
        );
        let msgs: Vec<String> = parse(&String::from_utf8_lossy(&kept))
            .into_iter()
            .map(|r| r.message)
            .collect();
        assert_eq!(msgs.len(), 2);
        assert!(RULE_MARKERS.iter().all(|(m, _)| read_by_rules(m)));
        assert!(!read_by_rules("systemd[1]: Hostname set"));
        assert_eq!(src.read("/proc/x").unwrap().unwrap(), b"1\n");
        assert_eq!(src.read("/nope").unwrap(), None);
    }

    #[test]
    fn a_source_s_task_status_holds_the_lines_parsed() {
        use crate::{MemFs, Source};
        let path = "/proc/7/task/8/status";
        let raw = "Name:\tdb-secret\nTgid:\t7\nCpus_allowed_list:\t0-3\nMems_allowed_list:\t0\nVmRSS:\t 100 kB\n";
        let src = RuleRecords(MemFs::new("t").with(path, raw).with("/proc/7/stat", raw));
        let kept = src.read(path).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(kept).unwrap(),
            "Cpus_allowed_list:\t0-3\nMems_allowed_list:\t0\nVmRSS:\t 100 kB\n"
        );
        // Only a task's status file is trimmed.
        assert_eq!(src.read("/proc/7/stat").unwrap().unwrap(), raw.as_bytes());
    }
}
