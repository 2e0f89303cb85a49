//! perf_event_open(2) by hand (raw syscall, no crate): the independent
//! reference for the hardware counter tests and the hw_counters benchmark.
#![allow(dead_code)]

/// A perf_event_attr of 128 bytes (the kernel accepts any size from
/// PERF_ATTR_SIZE_VER0 with zeros after): type, config, and read_format
/// TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING|GROUP; counts user and kernel.
pub fn attr(type_: u32, config: u64) -> [u8; 128] {
    let mut a = [0u8; 128];
    a[0..4].copy_from_slice(&type_.to_ne_bytes());
    a[4..8].copy_from_slice(&128u32.to_ne_bytes());
    a[8..16].copy_from_slice(&config.to_ne_bytes());
    a[32..40].copy_from_slice(&11u64.to_ne_bytes());
    a
}

/// Opens `a` on `cpu` for every task; the fd or -1.
pub fn open(a: &[u8; 128], cpu: i32) -> i64 {
    unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            a.as_ptr(),
            -1i32,
            cpu,
            -1i32,
            0u64,
        )
    }
}

/// Whether cycles (PERF_TYPE_HARDWARE 0, config 0) opens on CPU 0.
pub fn hardware_pmu_opens() -> bool {
    let fd = open(&attr(0, 0), 0);
    if fd >= 0 {
        unsafe { libc::close(fd as i32) };
    }
    fd >= 0
}
