//! Per-CPU kernel counters the probes read around and during a run: steal
//! from /proc/stat (for correlation), and hard IRQ and softirq counts from
//! /proc/interrupts and /proc/softirqs (the attribution fallback when tracefs
//! is unavailable). Files are kept open and re-read with pread; parsing is the
//! readers crate's (/proc/softirqs has the /proc/interrupts layout).

use std::path::Path;
use stealscope_readers::interrupts::{self, Interrupts};
use stealscope_readers::pread::PreadFile;
use stealscope_readers::stat::{self, ProcStat};
use stealscope_readers::ReadError;

pub const SOFTIRQS: &str = "/proc/softirqs";

/// Counters of one CPU at one moment; None where the file was unavailable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuCounts {
    /// Cumulative steal, USER_HZ ticks.
    pub steal_ticks: Option<u64>,
    /// Sum of this CPU's column over every per-CPU row of /proc/interrupts.
    pub irqs: Option<u64>,
    /// Sum of this CPU's column in /proc/softirqs.
    pub softirqs: Option<u64>,
}

pub struct Counters {
    stat: Option<PreadFile>,
    interrupts: Option<PreadFile>,
    softirqs: Option<PreadFile>,
    parsed: ProcStat,
}

/// Sum of `cpu`'s column over the rows that have one count per CPU.
pub fn per_cpu_sum(irq: &Interrupts, cpu: u32) -> Option<u64> {
    let col = irq.column_of(cpu)?;
    let n = irq.cpus.len();
    Some(
        irq.rows
            .iter()
            .filter(|r| r.is_per_cpu(n))
            .map(|r| r.counts[col])
            .fold(0u64, u64::wrapping_add),
    )
}

impl Counters {
    /// Opens what exists; `irq_counts` also opens the IRQ files (fallback).
    /// The files that could not be opened are returned as notes.
    pub fn open(irq_counts: bool) -> (Counters, Vec<String>) {
        let root = Path::new("/");
        let mut notes = Vec::new();
        let mut open = |path: &str, why: &str| match PreadFile::open(root, path) {
            Ok(f) => Some(f),
            Err(e) => {
                notes.push(format!("{e}: {why}"));
                None
            }
        };
        let stat = open(stat::PATH, "no steal figures to correlate with");
        let (interrupts, softirqs) = if irq_counts {
            (
                open(interrupts::PATH, "hard IRQs cannot be counted"),
                open(SOFTIRQS, "softirqs cannot be counted"),
            )
        } else {
            (None, None)
        };
        (
            Counters {
                stat,
                interrupts,
                softirqs,
                parsed: ProcStat::default(),
            },
            notes,
        )
    }

    /// Reads the open files once; one entry per CPU of `cpus`.
    pub fn sample(&mut self, cpus: &[u32]) -> Result<Vec<CpuCounts>, ReadError> {
        let mut out = vec![CpuCounts::default(); cpus.len()];
        if let Some(f) = self.stat.as_mut() {
            let text = f.read_text()?;
            stat::parse_into(text, stat::PATH, true, &mut self.parsed)?;
            for (o, &c) in out.iter_mut().zip(cpus) {
                o.steal_ticks = self.parsed.cpu(c).and_then(|t| t.steal);
            }
        }
        if let Some(f) = self.interrupts.as_mut() {
            let irq = interrupts::parse(f.read_text()?, interrupts::PATH)?;
            for (o, &c) in out.iter_mut().zip(cpus) {
                o.irqs = per_cpu_sum(&irq, c);
            }
        }
        if let Some(f) = self.softirqs.as_mut() {
            let soft = interrupts::parse(f.read_text()?, SOFTIRQS)?;
            for (o, &c) in out.iter_mut().zip(cpus) {
                o.softirqs = per_cpu_sum(&soft, c);
            }
        }
        Ok(out)
    }
}

/// Steal in µs between two readings of one CPU.
pub fn steal_us(a: &CpuCounts, b: &CpuCounts) -> Option<f64> {
    let (a, b) = (a.steal_ticks?, b.steal_ticks?);
    Some(b.saturating_sub(a) as f64 * 1e6 / crate::sys::user_hz())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softirqs_parse_with_the_interrupts_reader() {
        let text = "                    CPU0       CPU1       \n          HI:          7          0\n       TIMER:      24249      23142\n      NET_RX:       4712       6144\n";
        let s = interrupts::parse(text, SOFTIRQS).unwrap();
        assert_eq!(per_cpu_sum(&s, 0), Some(7 + 24249 + 4712));
        assert_eq!(per_cpu_sum(&s, 1), Some(23142 + 6144));
        assert_eq!(per_cpu_sum(&s, 2), None);
    }

    #[test]
    fn interrupts_sum_skips_single_column_rows() {
        let text = "  CPU0 CPU1\n 24: 1 2 IO-APIC x\nLOC: 10 20 Local timer interrupts\nERR: 5\n";
        let s = interrupts::parse(text, interrupts::PATH).unwrap();
        assert_eq!(per_cpu_sum(&s, 1), Some(22));
    }

    #[test]
    fn live_sample() {
        let (mut c, _notes) = Counters::open(true);
        let cpus = crate::sys::allowed_cpus().unwrap();
        let a = c.sample(&cpus).unwrap();
        assert_eq!(a.len(), cpus.len());
        assert!(a[0].irqs.is_some() && a[0].softirqs.is_some());
        let b = c.sample(&cpus).unwrap();
        assert!(b[0].irqs >= a[0].irqs);
        assert!(steal_us(&a[0], &b[0]).is_some_and(|s| s >= 0.0));
    }
}
