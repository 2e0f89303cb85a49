//! KVM exits by reason, what `perf kvm stat` shows: a short sample of the
//! kvm:kvm_exit tracepoint (arch/x86/kvm/trace.h) in a private tracing
//! instance. Enabling the event there leaves the global tracing state as it
//! was; the instance is removed and a tracefs mount made for it unmounted when
//! the sample ends. Counts are kept per thread id (the vCPU thread that
//! exited); the host model maps them to VMs.

use crate::tracefs::{self, Instance};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const INSTANCE_PREFIX: &str = "stealscope-kvmexit-";
pub const EVENT: &str = "kvm/kvm_exit";
/// Longest sample we take: the event costs a little on every exit.
pub const MAX_SAMPLE: Duration = Duration::from_secs(10);
/// Per-CPU ring buffer. A busy KVM host CPU makes up to ~100k exits/s of
/// ~160 bytes each; drained every DRAIN_EVERY this holds ~60 ms of them.
const BUFFER_KB: u32 = 1024;
const DRAIN_EVERY: Duration = Duration::from_millis(20);

/// The reason in a kvm_exit line's fields, in every format the event has had
/// (oldest first; the last is 6.18's events/kvm/kvm_exit/format):
///   "reason %s rip 0x%lx info %llx %llx"
///   "vcpu %u reason %s rip 0x%lx info %llx %llx"
///   "vcpu %u reason %s%s%s rip 0x%lx info1 0x%016llx info2 0x%016llx intr_info ..."
/// The reason may hold spaces (SVM "DE excp", VMX "EPT_VIOLATION FAILED_VMENTRY");
/// unknown codes print as hex ("0x4f").
pub fn exit_reason(fields: &str) -> Option<&str> {
    let rest = match fields.strip_prefix("reason ") {
        Some(r) => r,
        None => fields.split_once(" reason ")?.1,
    };
    let reason = rest.split_once(" rip ").map_or(rest, |(r, _)| r).trim();
    (!reason.is_empty()).then_some(reason)
}

/// Counts of one sample.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExitCounts {
    pub duration_s: f64,
    /// kvm_exit events seen.
    pub events: u64,
    /// Events the ring buffer dropped before we read them.
    pub lost: u64,
    /// kvm_exit lines whose reason could not be read.
    pub unparsed: u64,
    /// Thread id -> exit reason -> count.
    pub by_tid: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl ExitCounts {
    /// Feeds one line of trace text.
    pub fn line(&mut self, line: &str) {
        if line.contains("[LOST ") {
            self.lost += tracefs::lost_events(line).unwrap_or(0);
            return;
        }
        let Some(ev) = tracefs::parse_line(line) else {
            return;
        };
        if ev.name != "kvm_exit" {
            return;
        }
        self.events += 1;
        match (
            exit_reason(ev.fields),
            ev.pid.and_then(|p| u32::try_from(p).ok()),
        ) {
            (Some(r), Some(tid)) => {
                *self
                    .by_tid
                    .entry(tid)
                    .or_default()
                    .entry(r.to_string())
                    .or_default() += 1
            }
            _ => self.unparsed += 1,
        }
    }
}

/// What a sample found: counts, or why there are none. Stored externally
/// tagged ({"sampled": {...}} / {"not_available": {"reason": ...}}): an
/// internally tagged enum would lose the integer keys of `by_tid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitSample {
    Sampled(ExitCounts),
    NotAvailable { reason: String },
}

/// Enables kvm:kvm_exit in a private instance for `duration` (at most
/// MAX_SAMPLE) and counts exits. `allow_mount`: mount tracefs if needed.
pub fn sample(duration: Duration, allow_mount: bool) -> ExitSample {
    let duration = duration.min(MAX_SAMPLE);
    let not = |reason: String| ExitSample::NotAvailable { reason };
    let mut inst = match Instance::create(INSTANCE_PREFIX, allow_mount) {
        Ok(i) => i,
        Err(e) => return not(format!("tracefs: {e}")),
    };
    if !inst.has_event(EVENT) {
        return not(
            "kvm tracepoints not present (no events/kvm/kvm_exit in tracefs: KVM is not loaded)"
                .into(),
        );
    }
    let setup = inst
        .write("buffer_size_kb", &BUFFER_KB.to_string())
        .and_then(|_| inst.write(&format!("events/{EVENT}/enable"), "1"))
        .and_then(|_| inst.start());
    if let Err(e) = setup {
        return not(e);
    }
    let mut counts = ExitCounts::default();
    let start = Instant::now();
    while start.elapsed() < duration {
        std::thread::sleep(DRAIN_EVERY.min(duration.saturating_sub(start.elapsed())));
        inst.drain(|l| counts.line(l));
    }
    inst.stop();
    counts.duration_s = start.elapsed().as_secs_f64();
    inst.drain(|l| counts.line(l));
    ExitSample::Sampled(counts)
}

/// Sample instances that exist now (tests: none may be left behind).
pub fn leftover_instances() -> Vec<String> {
    tracefs::leftover_instances(INSTANCE_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines in the three formats (see exit_reason), VMX and SVM reasons.
    const TRACE: &str = "\
# tracer: nop
#
       CPU 0/KVM-10241   [000] d..1.  6382.360544: kvm_exit: vcpu 0 reason HLT rip 0xffffffff81e3c4ab info1 0x0000000000000000 info2 0x0000000000000000 intr_info 0x00000000 error_code 0x00000000 requests 0x0000000000000000
       CPU 0/KVM-10241   [000] d..1.  6382.360601: kvm_exit: vcpu 0 reason EXTERNAL_INTERRUPT rip 0xffffffff81e3c4ab info1 0x0000000000000000 info2 0x0000000000000000 intr_info 0x800000ec error_code 0x00000000 requests 0x0000000000000000
       CPU 1/KVM-10242   [001] d..1.  6382.360777: kvm_exit: vcpu 1 reason EPT_VIOLATION FAILED_VMENTRY rip 0xfff0 info1 0x0000000000000181 info2 0x0000000000000000 intr_info 0x00000000 error_code 0x00000000 requests 0x0000000000000000
       CPU 1/KVM-10242   [001] d..1.  6382.360790: kvm_entry: vcpu 1, rip 0xfff0
       CPU 3/KVM-2207    [003] d..1. 90210.000100: kvm_exit: vcpu 3 reason hlt rip 0xffffffff8100b3a2 info 0 0
       CPU 3/KVM-2207    [003] d..1. 90210.000190: kvm_exit: vcpu 3 reason DE excp rip 0x401000 info 0 0
 qemu-system-x86-2200    [002] d..1. 90210.000300: kvm_exit: reason MSR_WRITE rip 0xffffffff8106a2f4 info 0 0
CPU:2 [LOST 7 EVENTS]
       CPU 2/KVM-2206    [002] d..1. 90210.000400: kvm_exit: vcpu 2 rip 0x0
";

    #[test]
    fn counts_real_format_lines() {
        let mut c = ExitCounts::default();
        for l in TRACE.lines() {
            c.line(l);
        }
        assert_eq!(c.events, 7);
        assert_eq!(c.lost, 7);
        assert_eq!(c.unparsed, 1, "the line without a reason");
        assert_eq!(c.by_tid[&10241]["HLT"], 1);
        assert_eq!(c.by_tid[&10241]["EXTERNAL_INTERRUPT"], 1);
        assert_eq!(c.by_tid[&10242]["EPT_VIOLATION FAILED_VMENTRY"], 1);
        assert_eq!(c.by_tid[&2207]["hlt"], 1);
        assert_eq!(c.by_tid[&2207]["DE excp"], 1);
        assert_eq!(c.by_tid[&2200]["MSR_WRITE"], 1);
    }

    #[test]
    fn samples_round_trip_through_json() {
        let s = ExitSample::NotAvailable { reason: "x".into() };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["not_available"]["reason"], "x");
        assert_eq!(serde_json::from_value::<ExitSample>(v).unwrap(), s);
        let mut c = ExitCounts::default();
        c.line(TRACE.lines().nth(2).unwrap());
        let s = ExitSample::Sampled(c);
        let text = serde_json::to_string(&s).unwrap();
        assert!(text.contains("\"10241\""), "{text}");
        assert_eq!(serde_json::from_str::<ExitSample>(&text).unwrap(), s);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let mut c = ExitCounts::default();
            c.line(&s);
            let _ = exit_reason(&s);
        }
    }
}
