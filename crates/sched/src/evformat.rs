//! Event records of the scheduler and interrupt tracepoints, decoded by the
//! offsets and sizes in each event's `format` file (they differ between
//! kernels: never hard-coded).

use crate::aggregate::{Comm, Event};
use crate::ringbuf::uint;
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl Field {
    /// The integer value, sign-extended when the field is signed.
    pub fn int(&self, data: &[u8]) -> Option<i64> {
        let v = uint(data, self.offset, self.size)?;
        let bits = self.size as u32 * 8;
        Some(if self.signed && bits < 64 {
            ((v << (64 - bits)) as i64) >> (64 - bits)
        } else {
            v as i64
        })
    }

    pub fn comm(&self, data: &[u8]) -> Option<Comm> {
        let s = data.get(self.offset..self.offset + self.size.min(16))?;
        let mut c = [0u8; 16];
        c[..s.len()].copy_from_slice(s);
        Some(Comm(c))
    }
}

/// One `events/SYSTEM/NAME/format` file.
#[derive(Debug, Clone)]
pub struct EventFormat {
    pub name: String,
    pub id: u16,
    pub fields: HashMap<String, Field>,
    pub print_fmt: String,
}

impl EventFormat {
    pub fn parse(text: &str) -> Result<EventFormat, String> {
        let mut name = None;
        let mut id = None;
        let mut fields = HashMap::new();
        let mut print_fmt = String::new();
        for line in text.lines() {
            let t = line.trim();
            if let Some(v) = t.strip_prefix("name:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = t.strip_prefix("ID:") {
                id = v.trim().parse().ok();
            } else if let Some(v) = t.strip_prefix("print fmt:") {
                print_fmt = v.trim().to_string();
            } else if let Some(rest) = t.strip_prefix("field:") {
                let mut parts = rest.split(';').map(str::trim);
                let decl = parts.next().unwrap_or("");
                // "char prev_comm[16]" -> prev_comm
                let Some(last) = decl.split_whitespace().last() else {
                    continue;
                };
                let fname = last.split('[').next().unwrap_or(last).to_string();
                let (mut off, mut size, mut signed) = (None, None, false);
                for p in parts {
                    if let Some(v) = p.strip_prefix("offset:") {
                        off = v.parse().ok();
                    } else if let Some(v) = p.strip_prefix("size:") {
                        size = v.parse().ok();
                    } else if let Some(v) = p.strip_prefix("signed:") {
                        signed = v == "1";
                    }
                }
                if let (Some(offset), Some(size)) = (off, size) {
                    fields.insert(
                        fname,
                        Field {
                            offset,
                            size,
                            signed,
                        },
                    );
                }
            }
        }
        Ok(EventFormat {
            name: name.ok_or("no name: line")?,
            id: id.ok_or("no ID: line")?,
            fields,
            print_fmt,
        })
    }

    pub fn field(&self, name: &str) -> Result<Field, String> {
        self.fields
            .get(name)
            .copied()
            .ok_or_else(|| format!("no field {name}"))
    }

    /// Reads and parses `dir/format`; the error names the file.
    pub fn load(dir: &Path) -> Result<EventFormat, String> {
        let p = dir.join("format");
        let text = crate::tracefs_text::read_text(&p)?;
        EventFormat::parse(&text).map_err(|e| format!("{}: {e}", p.display()))
    }
}

/// sched_switch's `prev_state` bit for "preempted" (TASK_REPORT_MAX): twice
/// the highest state flag its print fmt lists (`{ 0x80, "I" }` -> 0x100),
/// 0x100 (every kernel since 4.14) when the table cannot be read.
pub fn preempt_bit(print_fmt: &str) -> u64 {
    let Some(start) = print_fmt.find("__print_flags(") else {
        return 0x100;
    };
    let max = print_fmt[start..]
        .split('{')
        .skip(1)
        .filter_map(|s| {
            let v = s.trim().split(',').next()?.trim();
            u64::from_str_radix(v.strip_prefix("0x")?, 16).ok()
        })
        .max();
    max.map_or(0x100, |m| m << 1)
}

struct Switch {
    id: u16,
    prev_pid: Field,
    prev_comm: Option<Field>,
    prev_state: Field,
    next_pid: Field,
    next_comm: Field,
    /// Bits of prev_state below the preempt bit: any set means it blocked.
    sleep_mask: u64,
}

struct PidCpu {
    pid: Field,
    cpu: Field,
}

enum Kind {
    Wakeup(PidCpu),
    Migrate {
        pid: Field,
        orig: Field,
        dest: Field,
    },
    IrqEnter,
    IrqExit,
    SoftirqEnter,
    SoftirqExit,
}

/// Turns raw records into [`Event`]s.
pub struct Decoder {
    common_type: Field,
    switch: Switch,
    kinds: HashMap<u16, Kind>,
}

impl Decoder {
    /// `switch` is sched_switch's format; `others` the rest, by name.
    pub fn new(switch: &EventFormat, others: &[EventFormat]) -> Result<Decoder, String> {
        let common_type = switch.field("common_type")?;
        let f = |e: &EventFormat, n: &str| e.field(n).map_err(|m| format!("{}: {m}", e.name));
        let sw = Switch {
            id: switch.id,
            prev_pid: f(switch, "prev_pid")?,
            prev_comm: switch.field("prev_comm").ok(),
            prev_state: f(switch, "prev_state")?,
            next_pid: f(switch, "next_pid")?,
            next_comm: f(switch, "next_comm")?,
            sleep_mask: preempt_bit(&switch.print_fmt) - 1,
        };
        let mut kinds = HashMap::new();
        for e in others {
            let k = match e.name.as_str() {
                "sched_wakeup" | "sched_wakeup_new" => Kind::Wakeup(PidCpu {
                    pid: f(e, "pid")?,
                    cpu: f(e, "target_cpu")?,
                }),
                "sched_migrate_task" => Kind::Migrate {
                    pid: f(e, "pid")?,
                    orig: f(e, "orig_cpu")?,
                    dest: f(e, "dest_cpu")?,
                },
                "irq_handler_entry" => Kind::IrqEnter,
                "irq_handler_exit" => Kind::IrqExit,
                "softirq_entry" => Kind::SoftirqEnter,
                "softirq_exit" => Kind::SoftirqExit,
                other => return Err(format!("{other}: not a scheduler event this route reads")),
            };
            kinds.insert(e.id, k);
        }
        Ok(Decoder {
            common_type,
            switch: sw,
            kinds,
        })
    }

    /// The event of one record read on `cpu` at `ts`; None for a record of
    /// another event or one too short for its fields.
    pub fn decode(&self, cpu: u32, ts: u64, data: &[u8]) -> Option<Event> {
        let id = self.common_type.int(data)? as u16;
        let u = |f: &Field| f.int(data).map(|v| v as u32);
        if id == self.switch.id {
            let s = &self.switch;
            let state = s.prev_state.int(data)? as u64;
            return Some(Event::Switch {
                cpu,
                ts,
                prev_tid: u(&s.prev_pid)?,
                prev_comm: s
                    .prev_comm
                    .as_ref()
                    .and_then(|f| f.comm(data))
                    .unwrap_or_default(),
                prev_runnable: state & s.sleep_mask == 0,
                next_tid: u(&s.next_pid)?,
                next_comm: s.next_comm.comm(data)?,
            });
        }
        Some(match self.kinds.get(&id)? {
            Kind::Wakeup(w) => Event::Wakeup {
                ts,
                tid: u(&w.pid)?,
                target_cpu: u(&w.cpu)?,
            },
            Kind::Migrate { pid, orig, dest } => Event::Migrate {
                ts,
                tid: u(pid)?,
                orig_cpu: u(orig)?,
                dest_cpu: u(dest)?,
            },
            Kind::IrqEnter => Event::IrqEnter { cpu, ts },
            Kind::IrqExit => Event::IrqExit { cpu, ts },
            Kind::SoftirqEnter => Event::SoftirqEnter { cpu, ts },
            Kind::SoftirqExit => Event::SoftirqExit { cpu, ts },
        })
    }
}

#[cfg(test)]
#[path = "evformat_tests.rs"]
mod tests;
