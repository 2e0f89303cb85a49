//! /proc/interrupts: a `CPUn` header of online CPUs, then one row per source:
//! numbered device IRQs (`24: counts chip hwirq-type name`) and named x86
//! rows from arch_show_interrupts (NMI LOC RES CAL TLB HYP ...). ERR and MIS
//! have a single column. Tokenised on whitespace since padding changed.

use crate::error::{ReadError, Result};
use serde::{Deserialize, Serialize};

pub const PATH: &str = "/proc/interrupts";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqRow {
    /// "24", "LOC", "CAL", ...
    pub name: String,
    /// One count per header CPU, or a single system-wide count (ERR, MIS).
    pub counts: Vec<u64>,
    /// Chip, hwirq and device name for numbered rows; a description for named ones.
    pub desc: String,
}

impl IrqRow {
    pub fn is_per_cpu(&self, ncpus: usize) -> bool {
        self.counts.len() == ncpus
    }

    /// Short label for reports: "LOC (Local timer interrupts)" or "36 virtio1-req.0".
    pub fn label(&self) -> String {
        if self.name.bytes().all(|b| b.is_ascii_digit()) {
            let dev = self.desc.split_ascii_whitespace().last().unwrap_or("");
            format!("IRQ {} {}", self.name, dev)
        } else if self.desc.is_empty() {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, self.desc)
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interrupts {
    /// CPU numbers from the header, in column order.
    pub cpus: Vec<u32>,
    pub rows: Vec<IrqRow>,
}

impl Interrupts {
    pub fn column_of(&self, cpu: u32) -> Option<usize> {
        self.cpus.iter().position(|&c| c == cpu)
    }
}

pub fn parse(text: &str, path: &str) -> Result<Interrupts> {
    let mut lines = text.lines();
    let header = lines
        .next()
        .ok_or_else(|| ReadError::parse(path, "empty file"))?;
    let mut cpus = Vec::new();
    for tok in header.split_ascii_whitespace() {
        let n = tok
            .strip_prefix("CPU")
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| {
                ReadError::parse(path, format!("line 1: header token {tok:?} is not CPUn"))
            })?;
        cpus.push(n);
    }
    if cpus.is_empty() {
        return Err(ReadError::parse(path, "line 1: no CPU columns in header"));
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let lineno = i + 2;
        if line.trim().is_empty() {
            continue;
        }
        let (name, rest) = line.split_once(':').ok_or_else(|| {
            ReadError::parse(path, format!("line {lineno}: no ':' after the source name"))
        })?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(ReadError::parse(
                path,
                format!("line {lineno}: bad source name {name:?}"),
            ));
        }
        let mut counts = Vec::with_capacity(cpus.len());
        let mut toks = rest.split_ascii_whitespace().peekable();
        while counts.len() < cpus.len() {
            match toks.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) => {
                    counts.push(v);
                    toks.next();
                }
                None => break,
            }
        }
        if counts.is_empty() {
            return Err(ReadError::parse(
                path,
                format!("line {lineno}: '{name}' has no counts"),
            ));
        }
        // Only ERR/MIS-style rows legitimately have one column; anything
        // between 1 and ncpus is a cut-off file.
        if counts.len() != cpus.len() && counts.len() != 1 {
            return Err(ReadError::parse(
                path,
                format!(
                    "line {lineno}: '{name}' has {} counts for {} CPUs (truncated?)",
                    counts.len(),
                    cpus.len()
                ),
            ));
        }
        let desc = toks.collect::<Vec<_>>().join(" ");
        rows.push(IrqRow {
            name: name.to_string(),
            counts,
            desc,
        });
    }
    Ok(Interrupts { cpus, rows })
}

pub fn read(src: &dyn crate::Source) -> Result<Option<Interrupts>> {
    match src.read_text(PATH)? {
        None => Ok(None),
        Some(text) => parse(&text, PATH).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n 36:          0       4932 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\nNMI:          0          0   Non-maskable interrupts\nLOC:       4991       5148   Local timer interrupts\nCAL:      18872      17434   Function call interrupts\nERR:          0\nMIS:          0\nPIN:          0          0   Posted-interrupt notification event\n";

    #[test]
    fn parses_real_guest_file() {
        let irq = parse(REAL, PATH).unwrap();
        assert_eq!(irq.cpus, vec![0, 1]);
        let cal = irq.rows.iter().find(|r| r.name == "CAL").unwrap();
        assert_eq!(cal.counts, vec![18872, 17434]);
        assert_eq!(cal.desc, "Function call interrupts");
        let err = irq.rows.iter().find(|r| r.name == "ERR").unwrap();
        assert_eq!(err.counts, vec![0]);
        let dev = irq.rows.iter().find(|r| r.name == "36").unwrap();
        assert_eq!(dev.label(), "IRQ 36 virtio1-req.0");
    }

    #[test]
    fn header_with_gaps_from_offline_cpus() {
        let irq = parse("  CPU0 CPU2\nLOC: 1 2 Local timer interrupts\n", PATH).unwrap();
        assert_eq!(irq.column_of(2), Some(1));
    }

    #[test]
    fn bad_input_names_the_file() {
        for bad in [
            "",
            "garbage\n",
            "CPU0 CPU1\nLOC 1 2\n",
            "CPU0 CPU1 CPU2\nLOC: 1 2\n",
        ] {
            let e = parse(bad, PATH).unwrap_err().to_string();
            assert!(e.starts_with("/proc/interrupts:"), "{e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse(&s, PATH);
        }
    }
}
