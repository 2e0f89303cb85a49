//! The msr driver's character devices, `/dev/cpu/N/msr`: the fallback for
//! TSC, APERF, MPERF and SMI_COUNT when the msr PMU is absent or does not
//! list an event. A pread of 8 bytes at offset = MSR index returns that
//! register read on CPU N (arch/x86/kernel/msr.c `msr_read`: rdmsr on
//! that CPU; EIO when the read faults, e.g. an MSR the hypervisor does not
//! expose). Opening needs CAP_SYS_RAWIO. The directory is a parameter so
//! tests use regular files, which pread the same way.

use super::{Counter, GroupRead};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const DEV_DIR: &str = "/dev/cpu";

/// Architectural MSR index of a counter (Intel SDM vol. 4; AMD uses the same
/// for TSC, MPERF, APERF; SMI_COUNT is Intel only).
pub fn index(c: Counter) -> Option<u64> {
    match c {
        Counter::Tsc => Some(0x10),
        Counter::Mperf => Some(0xE7),
        Counter::Aperf => Some(0xE8),
        Counter::Smi => Some(0x34),
        _ => None,
    }
}

/// The device of one CPU and the counters that read on it.
struct CpuDevice {
    cpu: u32,
    file: File,
    counters: Vec<Counter>,
}

/// Open devices; reads look like perf group reads whose enabled and running
/// times are the time since opening (the registers always count).
pub struct MsrDevices {
    cpus: Vec<CpuDevice>,
    opened_ns: u64,
}

/// Why a counter could not be read through the device on one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFailure {
    pub counter: Counter,
    pub cpu: u32,
    /// "/dev/cpu/3/msr: No such file or directory (os error 2)"
    pub error: String,
}

fn read_u64(f: &File, msr: u64) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, msr)?;
    Ok(u64::from_le_bytes(b))
}

fn device_path(dir: &Path, cpu: u32) -> PathBuf {
    dir.join(cpu.to_string()).join("msr")
}

impl MsrDevices {
    /// Opens `dir/N/msr` for each CPU and keeps the `wanted` counters whose
    /// first read succeeds. Never fails: what did not work is returned.
    pub fn open(
        dir: &Path,
        cpus: &[u32],
        wanted: &[Counter],
        now_ns: u64,
    ) -> (MsrDevices, Vec<DeviceFailure>) {
        let mut out = Vec::new();
        let mut failures = Vec::new();
        for &cpu in cpus {
            let path = device_path(dir, cpu);
            let fail = |counter, e: &std::io::Error| DeviceFailure {
                counter,
                cpu,
                error: format!("{}: {e}", path.display()),
            };
            let file = match File::open(&path) {
                Ok(f) => f,
                Err(e) => {
                    failures.extend(wanted.iter().map(|c| fail(*c, &e)));
                    continue;
                }
            };
            let mut counters = Vec::new();
            for &c in wanted {
                let Some(msr) = index(c) else { continue };
                match read_u64(&file, msr) {
                    Ok(_) => counters.push(c),
                    Err(e) => failures.push(fail(c, &e)),
                }
            }
            if !counters.is_empty() {
                out.push(CpuDevice {
                    cpu,
                    file,
                    counters,
                });
            }
        }
        (
            MsrDevices {
                cpus: out,
                opened_ns: now_ns,
            },
            failures,
        )
    }

    /// Counters readable on at least one CPU.
    pub fn opened(&self) -> Vec<Counter> {
        let mut v: Vec<Counter> = self
            .cpus
            .iter()
            .flat_map(|d| d.counters.iter().copied())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// One read per CPU, as a group; a CPU whose read fails (it went
    /// offline) is left out, a counter that fails alone is left out of its
    /// group.
    pub fn read(&self, now_ns: u64) -> Vec<(u32, GroupRead)> {
        let elapsed = now_ns.saturating_sub(self.opened_ns);
        self.cpus
            .iter()
            .filter_map(|d| {
                let counts: BTreeMap<Counter, u64> = d
                    .counters
                    .iter()
                    .filter_map(|c| Some((*c, read_u64(&d.file, index(*c)?).ok()?)))
                    .collect();
                (!counts.is_empty()).then_some((
                    d.cpu,
                    GroupRead {
                        enabled_ns: elapsed,
                        running_ns: elapsed,
                        counts,
                    },
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in device: a sparse file with the registers at their offsets.
    fn write_regs(dir: &Path, cpu: u32, regs: &[(Counter, u64)]) {
        let d = dir.join(cpu.to_string());
        std::fs::create_dir_all(&d).unwrap();
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(d.join("msr"))
            .unwrap();
        for (c, v) in regs {
            f.write_all_at(&v.to_le_bytes(), index(*c).unwrap())
                .unwrap();
        }
    }

    #[test]
    fn reads_registers_at_their_offsets_and_reports_what_failed() {
        let dir = tempfile::tempdir().unwrap();
        // CPU 0 has every register; CPU 1's file ends before APERF (0xE8):
        // a short read, as EIO from a faulting rdmsr would be; CPU 2 has
        // no device at all.
        write_regs(
            dir.path(),
            0,
            &[
                (Counter::Tsc, 1000),
                (Counter::Mperf, 500),
                (Counter::Aperf, 400),
                (Counter::Smi, 7),
            ],
        );
        write_regs(dir.path(), 1, &[(Counter::Tsc, 2000), (Counter::Mperf, 9)]);
        let wanted = [Counter::Tsc, Counter::Mperf, Counter::Aperf, Counter::Smi];
        let (dev, failures) = MsrDevices::open(dir.path(), &[0, 1, 2], &wanted, 100);
        let mut all = wanted.to_vec();
        all.sort();
        assert_eq!(dev.opened(), all);
        // CPU 1's file ends inside MPERF's 8 bytes: SMI (0x34) reads as 0,
        // APERF (0xE8) is past the end; CPU 2 fails all four.
        let mut f: Vec<(u32, Counter)> = failures.iter().map(|f| (f.cpu, f.counter)).collect();
        f.sort();
        assert_eq!(
            f,
            [
                (1, Counter::Aperf),
                (2, Counter::Tsc),
                (2, Counter::Aperf),
                (2, Counter::Mperf),
                (2, Counter::Smi),
            ]
        );
        assert!(failures
            .iter()
            .find(|f| f.cpu == 2)
            .unwrap()
            .error
            .contains("/2/msr"));

        write_regs(
            dir.path(),
            0,
            &[(Counter::Tsc, 3000), (Counter::Aperf, 1400)],
        );
        let reads = dev.read(600);
        assert_eq!(reads.len(), 2);
        let (cpu, g) = &reads[0];
        assert_eq!(*cpu, 0);
        assert_eq!((g.enabled_ns, g.running_ns), (500, 500));
        assert_eq!(g.counts[&Counter::Tsc], 3000);
        assert_eq!(g.counts[&Counter::Aperf], 1400);
        assert_eq!(g.counts[&Counter::Smi], 7);
        assert_eq!(reads[1].1.counts.len(), 3, "CPU 1 reads TSC, MPERF, SMI");
    }
}
