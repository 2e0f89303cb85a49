//! The clocks as the tests read them themselves: clock_gettime directly,
//! and sysfs for whether kvm-clock is there, never through the product.

/// `id` (CLOCK_MONOTONIC, CLOCK_BOOTTIME, ...) in ns.
pub fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for clock_gettime to fill.
    assert_eq!(unsafe { libc::clock_gettime(id, &mut ts) }, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This machine is a KVM guest that offers kvm-clock as a clocksource.
pub fn has_kvm_clock() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/available_clocksource")
        .is_ok_and(|s| s.split_whitespace().any(|c| c == "kvm-clock"))
}
