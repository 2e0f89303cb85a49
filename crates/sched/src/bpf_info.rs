//! What the kernel counts about each loaded program (`bpf_prog_info`):
//! `recursion_misses`, the runs it skipped because the same program was
//! already running on that CPU (kernel/trace/bpf_trace.c for raw_tp,
//! kernel/bpf/trampoline.c for tp_btf: one `active` counter per program
//! and CPU). Every such miss is an event the program never saw, so the
//! route counts them as lost. aya 0.14's `ProgramInfo` does not expose the
//! field; this asks the kernel directly.

use aya_obj::generated::bpf_prog_info;
use std::os::fd::{AsFd, AsRawFd};

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// `bpf_attr` for BPF_OBJ_GET_INFO_BY_FD.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// A program's counters: runs skipped as recursion, and (with
/// `kernel.bpf_stats_enabled`) run count and total run time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgStats {
    pub recursion_misses: u64,
    pub run_cnt: u64,
    pub run_time_ns: u64,
}

/// The kernel's counters of the program behind `fd`.
pub(crate) fn prog_stats(fd: impl AsFd) -> std::io::Result<ProgStats> {
    // SAFETY: bpf_prog_info is plain integers; all-zero is valid.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = InfoAttr {
        bpf_fd: fd.as_fd().as_raw_fd() as u32,
        info_len: std::mem::size_of::<bpf_prog_info>() as u32,
        info: &mut info as *mut bpf_prog_info as u64,
    };
    // SAFETY: attr points at `info`, which is info_len bytes and lives
    // across the call; the kernel writes at most info_len bytes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr as *mut InfoAttr,
            std::mem::size_of::<InfoAttr>(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ProgStats {
        recursion_misses: info.recursion_misses,
        run_cnt: info.run_cnt,
        run_time_ns: info.run_time_ns,
    })
}

const BPF_ENABLE_STATS: libc::c_long = 32;
const BPF_STATS_RUN_TIME: u32 = 0;

/// Turns on the kernel's run count and run time of every BPF program for
/// as long as the returned descriptor stays open (BPF_ENABLE_STATS, a
/// reference the kernel drops at close), like `kernel.bpf_stats_enabled=1`
/// but never left on by a process that dies. Needs CAP_SYS_ADMIN.
pub fn enable_run_stats() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut attr: u32 = BPF_STATS_RUN_TIME;
    // SAFETY: the attr is the union's `enable_stats { __u32 type; }`,
    // 4 bytes, alive across the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_ENABLE_STATS,
            &mut attr as *mut u32,
            std::mem::size_of::<u32>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor this process owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}
