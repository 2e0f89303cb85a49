//! The kernel's own evidence for the preempt probe: a dedicated tracefs
//! instance (so the global buffer and anyone using it are not disturbed)
//! recording hard IRQs (irq_handler_entry/exit and the x86 irq_vectors
//! *_entry/*_exit, which is where the local timer and IPIs show up),
//! softirq_entry/exit and sched_switch on the probed CPUs, with trace_clock
//! "mono" so the timestamps are the spinner's CLOCK_MONOTONIC. Events are read
//! from the instance's text trace_pipe while the probe runs.
//!
//! Cleanup: the instance is removed and a tracefs mount we made is unmounted
//! when the [`Tracer`] drops (stealscope_readers::tracefs::Instance). An
//! instance left by a killed (SIGKILL) earlier run is removed the next time a
//! probe starts.

use std::collections::{BTreeMap, HashMap};
use stealscope_readers::tracefs::{self as tfs, Instance, TraceLine};

const INSTANCE_PREFIX: &str = "stealscope-probe-";
/// Ring buffer per probed CPU. The reader may be starved while SCHED_FIFO
/// spinners hold every CPU (the fair server gives it ~50 ms a second), so the
/// buffer must hold a second or more of events: a busy guest CPU makes ~20k
/// IRQ/softirq/switch events a second at ~40 bytes each.
const BUFFER_KB_PROBED: u32 = 4096;
/// CPUs not probed record nothing (tracing_cpumask) and get a token buffer.
const BUFFER_KB_OTHER: u32 = 16;

/// One span on one CPU, ns CLOCK_MONOTONIC, `name` indexing [`TraceData::names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub name: u32,
}

/// A task's stretch on a CPU between two sched_switch events. Switches can
/// be missing from a trace (on some kernels the switch away from the idle
/// task is not recorded), so a span may run on past its real end; the
/// preempt attribution only trusts a span within a gap that it starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSpan {
    pub start: u64,
    pub end: u64,
    pub pid: i32,
    pub name: u32,
}

/// What one CPU did, in time order.
#[derive(Debug, Default)]
pub struct CpuTrace {
    /// Outermost hard IRQ handlers (device IRQs and x86 vectors).
    pub irq: Vec<Span>,
    pub softirq: Vec<Span>,
    pub tasks: Vec<TaskSpan>,
    irq_open: Option<(u64, u32)>,
    soft_open: Option<(u64, u32)>,
    current: Option<(u64, i32, u32)>,
}

#[derive(Debug, Default)]
pub struct TraceData {
    pub cpus: BTreeMap<u32, CpuTrace>,
    pub names: Vec<String>,
    name_ids: HashMap<String, u32>,
    pub events: u64,
    pub lost: u64,
    pub unparsed: u64,
}

impl TraceData {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.name_ids.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(s.to_string());
        self.name_ids.insert(s.to_string(), i);
        i
    }

    pub fn name(&self, i: u32) -> &str {
        self.names
            .get(i as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// Feeds one line of trace_pipe text.
    pub fn line(&mut self, line: &str) {
        if line.is_empty() || line.starts_with('#') {
            return;
        }
        if line.contains("[LOST ") {
            self.lost += tfs::lost_events(line).unwrap_or(0);
            return;
        }
        let Some(ev) = tfs::parse_line(line) else {
            self.unparsed += 1;
            return;
        };
        self.events += 1;
        self.event(ev);
    }

    fn event(&mut self, ev: TraceLine<'_>) {
        let TraceLine {
            cpu,
            ts,
            name,
            fields,
            ..
        } = ev;
        match name {
            "sched_switch" => {
                let Some((pid, comm)) = parse_next_task(fields) else {
                    self.unparsed += 1;
                    return;
                };
                let id = self.intern(comm);
                let t = self.cpus.entry(cpu).or_default();
                if let Some((start, p, n)) = t.current.take() {
                    t.tasks.push(TaskSpan {
                        start,
                        end: ts,
                        pid: p,
                        name: n,
                    });
                }
                t.current = Some((ts, pid, id));
            }
            "softirq_entry" => {
                let action = fields
                    .split("action=")
                    .nth(1)
                    .map(|a| a.trim_end_matches(']').trim())
                    .unwrap_or(fields);
                let id = self.intern(&format!("softirq {action}"));
                self.cpus.entry(cpu).or_default().soft_open = Some((ts, id));
            }
            "softirq_exit" => {
                let t = self.cpus.entry(cpu).or_default();
                if let Some((start, n)) = t.soft_open.take() {
                    t.softirq.push(Span {
                        start,
                        end: ts,
                        name: n,
                    });
                }
            }
            "irq_handler_entry" => {
                let irq = field(fields, "irq=").unwrap_or("?");
                let dev = fields.split("name=").nth(1).unwrap_or("").trim();
                let id = self.intern(&format!("IRQ {irq} {dev}"));
                self.irq_entry(cpu, ts, id);
            }
            "irq_handler_exit" => self.irq_exit(cpu, ts),
            _ => {
                if let Some(vector) = name.strip_suffix("_entry") {
                    let id = self.intern(vector);
                    self.irq_entry(cpu, ts, id);
                } else if name.ends_with("_exit") {
                    self.irq_exit(cpu, ts);
                }
            }
        }
    }

    /// Hard IRQ handlers do not nest (they run with interrupts off), so an
    /// entry while one is open means its exit was lost: start over.
    fn irq_entry(&mut self, cpu: u32, ts: u64, name: u32) {
        self.cpus.entry(cpu).or_default().irq_open = Some((ts, name));
    }

    fn irq_exit(&mut self, cpu: u32, ts: u64) {
        let t = self.cpus.entry(cpu).or_default();
        // None: the entry was before tracing started, or was lost.
        if let Some((start, name)) = t.irq_open.take() {
            t.irq.push(Span {
                start,
                end: ts,
                name,
            });
        }
    }

    /// Closes what is still open at `end` (the task running, an IRQ in flight).
    pub fn close(&mut self, end: u64) {
        for t in self.cpus.values_mut() {
            if let Some((start, pid, name)) = t.current.take() {
                t.tasks.push(TaskSpan {
                    start,
                    end: end.max(start),
                    pid,
                    name,
                });
            }
            if let Some((start, name)) = t.irq_open.take() {
                t.irq.push(Span {
                    start,
                    end: end.max(start),
                    name,
                });
            }
            if let Some((start, name)) = t.soft_open.take() {
                t.softirq.push(Span {
                    start,
                    end: end.max(start),
                    name,
                });
            }
        }
    }
}

fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let i = fields.find(key)?;
    fields[i + key.len()..].split_ascii_whitespace().next()
}

/// "next_comm=CPU 0/TCG next_pid=32733 next_prio=120" -> (32733, "CPU 0/TCG").
/// Comms may hold spaces, so the pid is found from the right.
fn parse_next_task(fields: &str) -> Option<(i32, &str)> {
    let next = fields.rsplit_once("==> ")?.1;
    let comm_start = next.find("next_comm=")? + "next_comm=".len();
    let pid_at = next.rfind(" next_pid=")?;
    let comm = next.get(comm_start..pid_at)?;
    let pid = next[pid_at + " next_pid=".len()..]
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((pid, comm))
}

/// tracing_cpumask format: 32-bit hex groups, most significant first.
fn cpumask(cpus: &[u32]) -> String {
    let max = cpus.iter().copied().max().unwrap_or(0);
    let groups = (max / 32 + 1) as usize;
    let mut words = vec![0u32; groups];
    for &c in cpus {
        words[(c / 32) as usize] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A running trace of the probed CPUs. Drop removes the instance and
/// unmounts tracefs if it was mounted for it.
pub struct Tracer {
    inst: Instance,
    pub data: TraceData,
}

impl Tracer {
    /// Sets up and starts the instance. `allow_mount`: mount tracefs on
    /// /sys/kernel/tracing if nothing is mounted there (unmounted on drop).
    /// The error is a reason for the report's notes.
    pub fn start(cpus: &[u32], allow_mount: bool) -> Result<Tracer, String> {
        let mut inst = Instance::create(INSTANCE_PREFIX, allow_mount)?;
        inst.write("trace_clock", "mono")?;
        inst.write("buffer_size_kb", &BUFFER_KB_OTHER.to_string())?;
        for c in cpus {
            inst.write(
                &format!("per_cpu/cpu{c}/buffer_size_kb"),
                &BUFFER_KB_PROBED.to_string(),
            )?;
        }
        inst.write("tracing_cpumask", &cpumask(cpus))?;
        for e in [
            "irq/irq_handler_entry",
            "irq/irq_handler_exit",
            "irq/softirq_entry",
            "irq/softirq_exit",
            "sched/sched_switch",
        ] {
            inst.write(&format!("events/{e}/enable"), "1")?;
        }
        // x86: the local APIC timer, IPIs and irq_work never pass through
        // irq_handler_entry; their vectors have their own events.
        if let Ok(dir) = std::fs::read_dir(inst.path().join("events/irq_vectors")) {
            for e in dir.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.ends_with("_entry") || n.ends_with("_exit") {
                    let _ = inst.write(&format!("events/irq_vectors/{n}/enable"), "1");
                }
            }
        }
        inst.start()?;
        Ok(Tracer {
            inst,
            data: TraceData::default(),
        })
    }

    /// Where the events come from, for evidence.
    pub fn describe(&self) -> String {
        self.inst.path().display().to_string()
    }

    /// Reads whatever the pipe has now (never blocks).
    pub fn drain(&mut self) {
        let data = &mut self.data;
        self.inst.drain(|l| data.line(l));
    }

    /// Stops recording, reads the rest and returns the events; spans still
    /// open are closed at `end_ns`.
    pub fn finish(mut self, end_ns: u64) -> TraceData {
        self.inst.stop();
        self.drain();
        self.data.close(end_ns);
        std::mem::take(&mut self.data)
    }
}

/// Instances of ours that exist now (tests: none may be left behind).
pub fn leftover_instances() -> Vec<String> {
    tfs::leftover_instances(INSTANCE_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
       CPU 0/TCG-32733   [001] d.h..  1107.667837: local_timer_entry: vector=236
       CPU 0/TCG-32733   [001] dNh..  1107.667861: local_timer_exit: vector=236
       CPU 0/TCG-32733   [001] d..2.  1107.667864: sched_switch: prev_comm=CPU 0/TCG prev_pid=32733 prev_prio=120 prev_state=R ==> next_comm=qemu-system-x86 next_pid=32730 next_prio=120
 qemu-system-x86-32730   [001] d..2.  1107.667872: sched_switch: prev_comm=qemu-system-x86 prev_pid=32730 prev_prio=120 prev_state=S ==> next_comm=CPU 0/TCG next_pid=32733 next_prio=120
       CPU 0/TCG-32733   [001] d.h..  1107.668007: local_timer_entry: vector=236
       CPU 0/TCG-32733   [001] d.h..  1107.668010: softirq_raise: vec=9 [action=RCU]
       CPU 0/TCG-32733   [001] dNh..  1107.668016: local_timer_exit: vector=236
       CPU 0/TCG-32733   [001] .Ns..  1107.668017: softirq_entry: vec=9 [action=RCU]
       CPU 0/TCG-32733   [001] .Ns..  1107.668019: softirq_exit: vec=9 [action=RCU]
 qemu-system-x86-32629   [000] d.H1.  1107.668184: irq_handler_entry: irq=36 name=virtio1-req.0
 qemu-system-x86-32629   [000] d.H1.  1107.668190: irq_handler_exit: irq=36 ret=handled
CPU:1 [LOST 12 EVENTS]
";

    #[test]
    fn parses_real_lines() {
        let mut d = TraceData::default();
        for l in SAMPLE.lines() {
            d.line(l);
        }
        d.close(1_107_668_100_000);
        assert_eq!(d.lost, 12);
        assert_eq!(d.unparsed, 0);
        let c1 = &d.cpus[&1];
        assert_eq!(c1.irq.len(), 2);
        assert_eq!(c1.irq[0].start, 1_107_667_837_000);
        assert_eq!(c1.irq[0].end, 1_107_667_861_000);
        assert_eq!(d.name(c1.irq[0].name), "local_timer");
        assert_eq!(c1.softirq.len(), 1);
        assert_eq!(d.name(c1.softirq[0].name), "softirq RCU");
        // Two switches: qemu ran 864..872, then "CPU 0/TCG" from 872 to close.
        assert_eq!(c1.tasks.len(), 2);
        assert_eq!(c1.tasks[0].pid, 32730);
        assert_eq!(c1.tasks[0].end - c1.tasks[0].start, 8_000);
        assert_eq!(d.name(c1.tasks[1].name), "CPU 0/TCG");
        let c0 = &d.cpus[&0];
        assert_eq!(d.name(c0.irq[0].name), "IRQ 36 virtio1-req.0");
        assert_eq!(c0.irq[0].end - c0.irq[0].start, 6_000);
    }

    #[test]
    fn next_task_with_spaces() {
        assert_eq!(
            parse_next_task("prev_comm=a ==> next_comm=x y next_pid=42 next_prio=9"),
            Some((42, "x y"))
        );
    }

    #[test]
    fn lost_irq_exits_and_entries_heal() {
        let mut d = TraceData::default();
        d.line("t-1 [000] d.h.. 1.000010: irq_handler_exit: irq=1 ret=handled");
        d.line("t-1 [000] d.h.. 1.000020: local_timer_entry: vector=236");
        // local_timer_exit lost; the next entry starts over.
        d.line("t-1 [000] d.h.. 1.000522: irq_handler_entry: irq=5 name=x");
        d.line("t-1 [000] d.h.. 1.000524: irq_handler_exit: irq=5 ret=handled");
        d.line("t-1 [000] d.h.. 1.000530: local_timer_entry: vector=236");
        d.line("t-1 [000] d.h.. 1.000533: local_timer_exit: vector=236");
        let c = &d.cpus[&0];
        assert_eq!(c.irq.len(), 2);
        assert_eq!(
            (c.irq[0].start, c.irq[0].end),
            (1_000_522_000, 1_000_524_000)
        );
        assert_eq!(
            (c.irq[1].start, c.irq[1].end),
            (1_000_530_000, 1_000_533_000)
        );
    }

    #[test]
    fn cpumask_format() {
        assert_eq!(cpumask(&[0, 1]), "00000003");
        assert_eq!(cpumask(&[1]), "00000002");
        assert_eq!(cpumask(&[0, 33]), "00000002,00000001");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let mut d = TraceData::default();
            d.line(&s);
            d.close(0);
        }
    }
}
