//! kvm-clock read on this machine (a KVM guest) against the guest's own
//! clocks: it runs at CLOCK_MONOTONIC_RAW's rate (the guest kernel's own
//! TSC calibration, not the host's `mul`), and it is ahead of
//! CLOCK_BOOTTIME by at least the kvm-clock value the kernel printed at
//! boot ("kvm-clock: using sched offset of N cycles", which is ns of
//! kvm-clock when the guest's sched clock started: kvm-clock counts from
//! the VM's creation, before the guest booted).

use stealscope_readers::kvmclock::KvmClock;
use stealscope_testkit::clock::{clock_ns, has_kvm_clock};
use stealscope_testkit::require;

/// The boot-time kvm-clock the kernel printed, ns, if dmesg still has it.
fn boot_sched_offset() -> Option<u64> {
    let out = std::process::Command::new("dmesg").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("kvm-clock: using sched offset of"))?;
    line.split("offset of ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn kvm_clock_runs_with_the_guests_clocks() {
    if !require(has_kvm_clock(), "a KVM guest with kvm-clock") {
        return;
    }
    let c = KvmClock::open().expect("kvm-clock on a KVM guest");
    let (raw0, a) = (clock_ns(libc::CLOCK_MONOTONIC_RAW), c.anchor().unwrap());
    let boot = clock_ns(libc::CLOCK_BOOTTIME);
    std::thread::sleep(std::time::Duration::from_millis(800));
    let (raw1, b) = (clock_ns(libc::CLOCK_MONOTONIC_RAW), c.anchor().unwrap());
    let (dk, dr) = (b.kvm_ns - a.kvm_ns, raw1 - raw0);
    let ppm = (dk as f64 - dr as f64) / dr as f64 * 1e6;
    let ahead = a.kvm_ns as i64 - boot as i64;
    eprintln!(
        "kvm-clock {:.6} s, {:.3} ms ahead of CLOCK_BOOTTIME; over {:.3} s {ppm:+.1} ppm against CLOCK_MONOTONIC_RAW; pvti {:?}",
        a.kvm_ns as f64 / 1e9,
        ahead as f64 / 1e6,
        dr as f64 / 1e9,
        c.pvti().unwrap()
    );
    // Two readings of the raw clock bracket each anchor within ~20 us, so
    // over 0.8 s the bound is 50 us of slack (62 ppm) on top of the rate
    // calibrations' own error.
    assert!(ppm.abs() < 150.0, "{ppm} ppm");
    match boot_sched_offset() {
        Some(off) => assert!(
            ahead >= off as i64,
            "kvm-clock is {ahead} ns ahead of CLOCK_BOOTTIME, the kernel saw {off} at boot"
        ),
        None => assert!(ahead > 0, "kvm-clock {ahead} ns behind CLOCK_BOOTTIME"),
    }
}
