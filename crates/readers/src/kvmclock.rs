//! kvm-clock time inside a KVM guest: the clock the host's KVM keeps for
//! this VM (ns since the VM was created, the same on every vCPU), so that a
//! guest recording and a host recording of the same period can be joined.
//!
//! Read as the kernel's vDSO reads it (arch/x86/include/asm/vdso/
//! gettimeofday.h, `vread_pvclock`): vCPU 0's `pvclock_vcpu_time_info`,
//! which the kernel maps read-only into every process as the first page of
//! `[vvar_vclock]` once kvm-clock has been the clocksource (it is at boot on
//! KVM, before the kernel moves to a stable TSC), and `rdtsc`:
//! `system_time + ((tsc - tsc_timestamp) << shift) * mul >> 32`
//! (`pvclock_scale_delta`). Like the vDSO it is used only with
//! PVCLOCK_TSC_STABLE_BIT, which makes vCPU 0's page valid on every vCPU.
//! No crate reads it. The page is read directly (/proc/self/mem and
//! process_vm_readv refuse a PFN mapping); where kvm-clock was never the
//! clocksource the kernel answers a touch of the page with SIGBUS, so a
//! forked child touches it first and only its clean exit lets us read.

use crate::clock::monotonic_ns;
use serde::{Deserialize, Serialize};

/// PVCLOCK_TSC_STABLE_BIT (arch/x86/include/asm/pvclock-abi.h).
const TSC_STABLE: u8 = 1;
/// An anchor's kvm-clock and CLOCK_MONOTONIC reads lie within this of each
/// other, or it is taken again (an interrupt came between them).
const MAX_BRACKET_NS: u64 = 20_000;

/// CLOCK_MONOTONIC and kvm-clock at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmClockAnchor {
    pub mono_ns: u64,
    pub kvm_ns: u64,
}

impl KvmClockAnchor {
    /// kvm-clock at CLOCK_MONOTONIC `mono_ns`, from this anchor alone.
    pub fn kvm_at(&self, mono_ns: u64) -> u64 {
        (self.kvm_ns as i128 + mono_ns as i128 - self.mono_ns as i128).max(0) as u64
    }
}

/// kvm-clock at `mono_ns` between two anchors, interpolated: CLOCK_MONOTONIC
/// is slewed by NTP (up to 500 ppm) and kvm-clock is not, so one offset
/// drifts over a long recording while two follow a steady slew.
pub fn kvm_between(a: &KvmClockAnchor, b: Option<&KvmClockAnchor>, mono_ns: u64) -> u64 {
    match b {
        Some(b) if b.mono_ns > a.mono_ns => {
            let f = (mono_ns as f64 - a.mono_ns as f64) / (b.mono_ns - a.mono_ns) as f64;
            let k = a.kvm_ns as f64 + f * (b.kvm_ns as f64 - a.kvm_ns as f64);
            k.max(0.0).round() as u64
        }
        _ => a.kvm_at(mono_ns),
    }
}

/// Why kvm-clock could not be read (one line each).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvmClockError {
    #[error("kvm-clock is read with rdtsc, on x86-64 only")]
    NotX86,
    #[error("/proc/self/maps has no [vvar_vclock] mapping (not a KVM guest, or a kernel before 6.x that maps the pvclock page elsewhere)")]
    NoMapping,
    #[error("the pvclock page in [vvar_vclock] is not readable ({0}): kvm-clock was never this kernel's clocksource")]
    Unreadable(String),
    #[error("the pvclock page is empty: this is not a KVM guest with kvm-clock")]
    Empty,
    #[error(
        "kvm-clock's PVCLOCK_TSC_STABLE_BIT is clear: vCPU 0's clock is not valid on every vCPU"
    )]
    Unstable,
    #[error("the pvclock page was being updated on every read")]
    Busy,
}

/// vCPU 0's `struct pvclock_vcpu_time_info` (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pvti {
    pub version: u32,
    pub tsc_timestamp: u64,
    pub system_time: u64,
    pub mul: u32,
    pub shift: i8,
    pub flags: u8,
}

impl Pvti {
    pub fn parse(b: &[u8; 32]) -> Pvti {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Pvti {
            version: u32_at(0),
            tsc_timestamp: u64_at(8),
            system_time: u64_at(16),
            mul: u32_at(24),
            shift: b[28] as i8,
            flags: b[29],
        }
    }

    /// kvm-clock at TSC `tsc` (`__pvclock_read_cycles`).
    pub fn kvm_ns(&self, tsc: u64) -> u64 {
        let mut d = tsc.wrapping_sub(self.tsc_timestamp);
        if self.shift < 0 {
            d >>= -(self.shift as i32);
        } else {
            d <<= self.shift;
        }
        self.system_time
            .wrapping_add(((d as u128 * self.mul as u128) >> 32) as u64)
    }
}

/// The pvclock page's address in this process.
fn vclock_page() -> Result<u64, KvmClockError> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|_| KvmClockError::NoMapping)?;
    let line = maps
        .lines()
        .find(|l| l.ends_with("[vvar_vclock]"))
        .ok_or(KvmClockError::NoMapping)?;
    let start = line.split('-').next().unwrap_or_default();
    u64::from_str_radix(start, 16).map_err(|_| KvmClockError::NoMapping)
}

/// The 32 bytes at `at`, read as the vDSO reads them.
fn copy_page(at: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    // SAFETY: `at` is the start of [vvar_vclock], a read-only page this
    // process maps for its whole life, and `touch_in_child` saw it read
    // without a fault before any read here.
    for (i, x) in b.iter_mut().enumerate() {
        *x = unsafe { std::ptr::read_volatile((at as *const u8).add(i)) };
    }
    b
}

/// Touches the page in a forked child: a page the kernel will not map
/// kills the child with SIGBUS instead of us.
fn touch_in_child(at: u64) -> Result<(), KvmClockError> {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // SAFETY: the child only reads memory and calls _exit, both
    // async-signal-safe, so forking a threaded process is sound.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let _ = copy_page(at);
            // SAFETY: _exit ends the child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(0) }
        }
        Ok(ForkResult::Parent { child }) => match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, 0)) => Ok(()),
            Ok(WaitStatus::Signaled(_, sig, _)) => {
                Err(KvmClockError::Unreadable(format!("a read got {sig}")))
            }
            other => Err(KvmClockError::Unreadable(format!(
                "the probe ended {other:?}"
            ))),
        },
        Err(e) => Err(KvmClockError::Unreadable(format!("fork: {e}"))),
    }
}

/// One consistent copy of the page: an even version, the same before and
/// after (the host writes it with an odd version, as the vDSO checks).
fn read_pvti(at: u64) -> Result<Pvti, KvmClockError> {
    for _ in 0..100 {
        let p = Pvti::parse(&copy_page(at));
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        if p.version.is_multiple_of(2) && Pvti::parse(&copy_page(at)).version == p.version {
            return Ok(p);
        }
    }
    Err(KvmClockError::Busy)
}

/// kvm-clock for this process: the page's address, checked readable.
#[derive(Debug)]
pub struct KvmClock {
    at: u64,
}

impl KvmClock {
    pub fn open() -> Result<KvmClock, KvmClockError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(KvmClockError::NotX86);
        }
        let at = vclock_page()?;
        touch_in_child(at)?;
        let c = KvmClock { at };
        let p = c.pvti()?;
        if p.mul == 0 && p.system_time == 0 {
            return Err(KvmClockError::Empty);
        }
        if p.flags & TSC_STABLE == 0 {
            return Err(KvmClockError::Unstable);
        }
        Ok(c)
    }

    pub fn pvti(&self) -> Result<Pvti, KvmClockError> {
        read_pvti(self.at)
    }

    /// kvm-clock and CLOCK_MONOTONIC now: the page read fresh (the host
    /// rewrites it when it adjusts the clock), then the narrowest of three
    /// TSC-bracketed monotonic reads.
    pub fn anchor(&self) -> Result<KvmClockAnchor, KvmClockError> {
        let p = self.pvti()?;
        let mut best: Option<(u64, KvmClockAnchor)> = None;
        for _ in 0..3 {
            let a = crate::tsc_clock::anchor();
            let after = monotonic_ns();
            let x = KvmClockAnchor {
                mono_ns: a.ns,
                kvm_ns: p.kvm_ns(a.tsc),
            };
            let spread = after.saturating_sub(a.ns);
            if spread <= MAX_BRACKET_NS {
                return Ok(x);
            }
            if best.is_none_or(|(s, _)| spread < s) {
                best = Some((spread, x));
            }
        }
        Ok(best.expect("three tries").1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_is_the_kernels() {
        // shift -1, mul 2^31: a TSC cycle is a quarter ns.
        let p = Pvti {
            version: 2,
            tsc_timestamp: 1_000,
            system_time: 5_000,
            mul: 1 << 31,
            shift: -1,
            flags: 1,
        };
        assert_eq!(p.kvm_ns(1_000 + 4_000), 5_000 + 1_000);
        let q = Pvti { shift: 1, ..p };
        assert_eq!(q.kvm_ns(1_000 + 4_000), 5_000 + 4_000);
    }

    #[test]
    fn two_anchors_follow_a_slew() {
        let a = KvmClockAnchor {
            mono_ns: 1_000_000,
            kvm_ns: 5_000_000,
        };
        // Monotonic ran 1000 ppm slow against kvm-clock over 1 s.
        let b = KvmClockAnchor {
            mono_ns: 1_001_000_000,
            kvm_ns: 1_006_000_000,
        };
        assert_eq!(kvm_between(&a, Some(&b), 501_000_000), 505_500_000);
        assert_eq!(kvm_between(&a, None, 501_000_000), 505_000_000);
    }

    #[test]
    fn a_parsed_page_reads_its_fields() {
        let mut b = [0u8; 32];
        b[0..4].copy_from_slice(&336u32.to_le_bytes());
        b[8..16].copy_from_slice(&3_521_493_716u64.to_le_bytes());
        b[16..24].copy_from_slice(&1_356_790_453u64.to_le_bytes());
        b[24..28].copy_from_slice(&3_308_731_918u32.to_le_bytes());
        b[28] = 0xff;
        b[29] = 1;
        let p = Pvti::parse(&b);
        assert_eq!(
            (p.version, p.shift, p.flags, p.mul),
            (336, -1, 1, 3_308_731_918)
        );
    }
}
