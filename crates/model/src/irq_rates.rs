//! Interrupt rates per CPU between two /proc/interrupts readings. Counts are
//! 32-bit on most arches (unsigned int), so a decrease below 2^32 is a wrap.

use serde::{Deserialize, Serialize};
use stealscope_readers::interrupts::Interrupts;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceRate {
    pub name: String,
    pub label: String,
    pub per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuIrqRates {
    pub cpu: u32,
    pub total_per_s: f64,
    /// Sources on this CPU, highest rate first.
    pub sources: Vec<SourceRate>,
}

fn counter_delta(a: u64, b: u64) -> Option<u64> {
    if b >= a {
        Some(b - a)
    } else if a <= u32::MAX as u64 && b <= u32::MAX as u64 {
        Some(b + (1u64 << 32) - a)
    } else {
        None // reset (another tool cannot reset these; treat as unknown)
    }
}

pub fn rates(t0: &Interrupts, t1: &Interrupts, wall_s: f64) -> Vec<CpuIrqRates> {
    let mut out = Vec::new();
    if !wall_s.is_finite() || wall_s <= 0.0 {
        return out;
    }
    for (col1, &cpu) in t1.cpus.iter().enumerate() {
        let Some(col0) = t0.column_of(cpu) else {
            continue;
        };
        let mut sources = Vec::new();
        for row1 in &t1.rows {
            if !row1.is_per_cpu(t1.cpus.len()) {
                continue;
            }
            let Some(row0) = t0
                .rows
                .iter()
                .find(|r| r.name == row1.name && r.is_per_cpu(t0.cpus.len()))
            else {
                continue;
            };
            let (Some(&a), Some(&b)) = (row0.counts.get(col0), row1.counts.get(col1)) else {
                continue;
            };
            if let Some(d) = counter_delta(a, b) {
                if d > 0 {
                    sources.push(SourceRate {
                        name: row1.name.clone(),
                        label: row1.label(),
                        per_s: d as f64 / wall_s,
                    });
                }
            }
        }
        sources.sort_by(|a, b| b.per_s.total_cmp(&a.per_s));
        let total_per_s = sources.iter().map(|s| s.per_s).sum();
        out.push(CpuIrqRates {
            cpu,
            total_per_s,
            sources,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_readers::interrupts::parse;

    #[test]
    fn rates_and_wrap() {
        let a = parse("CPU0 CPU1\nLOC: 100 4294967290 Local timer interrupts\nCAL: 5 5 Function call interrupts\nERR: 1\n", "p").unwrap();
        let b = parse("CPU0 CPU1\nLOC: 300 4 Local timer interrupts\nCAL: 5 1005 Function call interrupts\nERR: 9\n", "p").unwrap();
        let r = rates(&a, &b, 2.0);
        assert_eq!(r[0].total_per_s, 100.0);
        assert_eq!(r[1].sources[0].name, "CAL");
        assert_eq!(r[1].sources[0].per_s, 500.0);
        assert_eq!(r[1].sources[1].per_s, 5.0); // wrapped LOC: 10 counts
    }
}
