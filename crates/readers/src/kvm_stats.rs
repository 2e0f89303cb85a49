//! KVM's binary statistics (ioctl KVM_GET_STATS_FD; Documentation/virt/kvm/
//! api.rst "KVM_GET_STATS_FD", include/uapi/linux/kvm.h, virt/kvm/
//! binary_stats.c). The stats fd reads as one file, in host byte order:
//!
//! ```text
//! header      u32 flags, name_size, num_desc, id_offset, desc_offset, data_offset
//! id          name_size bytes at id_offset: "kvm-<tid>" or "kvm-<tid>/vcpu-<n>",
//!             tid = the thread that created the VM or vCPU (task_pid_nr(current))
//! descriptors num_desc x { u32 flags; s16 exponent; u16 size; u32 offset;
//!             u32 bucket_size; char name[name_size] } at desc_offset
//! data        u64 values at data_offset: a stat's `size` values start at its `offset`
//! ```
//!
//! Who can read it: the ioctl on a VM or vCPU fd answers only the process
//! that created the VM (kvm_vm_ioctl and kvm_vcpu_ioctl return -EIO when
//! current->mm is not the VM's mm), so a monitoring tool cannot make a stats
//! fd out of a VMM's VM fd, even one taken with pidfd_getfd(2). It can read a
//! stats fd the VMM already holds (reading has no such check), or what the
//! VMM exports of it (QEMU's QMP `query-stats`, used by the host model).

use crate::error::{ReadError, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const HEADER_LEN: usize = 24;
/// Fixed part of a descriptor; the name follows, `name_size` bytes.
const DESC_FIXED_LEN: usize = 16;
/// Far above any kernel's counts (x86 has ~50 vCPU stats, KVM_STATS_NAME_SIZE 48).
const MAX_DESC: u32 = 4096;
const MAX_NAME: u32 = 4096;

/// KVM_STATS_TYPE_* (flags bits 0-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatKind {
    Cumulative,
    Instant,
    Peak,
    LinearHist,
    LogHist,
    Unknown,
}

/// KVM_STATS_UNIT_* (flags bits 4-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StatUnit {
    None,
    Bytes,
    Seconds,
    Cycles,
    Boolean,
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    pub name: String,
    pub kind: StatKind,
    pub unit: StatUnit,
    /// KVM_STATS_BASE_POW2 (else powers of ten) for `exponent`.
    pub base_pow2: bool,
    /// value x base^exponent is in `unit` (e.g. -9 with seconds: ns).
    pub exponent: i16,
    /// Bucket width of a linear histogram.
    pub bucket_size: u32,
    pub values: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsFile {
    /// "kvm-<tid>" (VM) or "kvm-<tid>/vcpu-<n>"; tid of the creating thread.
    pub id: String,
    pub stats: Vec<Stat>,
}

impl StatsFile {
    /// The vCPU index when this is a vCPU's file.
    pub fn vcpu(&self) -> Option<u32> {
        self.id.rsplit_once("/vcpu-")?.1.parse().ok()
    }

    /// Single-valued cumulative counters by name (what rates are made of).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.stats
            .iter()
            .filter(|s| s.kind == StatKind::Cumulative && s.values.len() == 1)
            .map(|s| (s.name.clone(), s.values[0]))
            .collect()
    }
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Parses the whole content of a stats fd (`path` names it in errors).
pub fn parse(b: &[u8], path: &str) -> Result<StatsFile> {
    let bad = |msg: String| ReadError::parse(path, msg);
    if b.len() < HEADER_LEN {
        return Err(bad(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            b.len()
        )));
    }
    let h = |i: usize| u32_at(b, 4 * i).unwrap_or(0);
    let (name_size, num_desc, id_off, desc_off, data_off) = (h(1), h(2), h(3), h(4), h(5));
    if name_size == 0 || name_size > MAX_NAME {
        return Err(bad(format!("name_size {name_size} is not plausible")));
    }
    if num_desc > MAX_DESC {
        return Err(bad(format!("num_desc {num_desc} is not plausible")));
    }
    let id = b
        .get(id_off as usize..id_off as usize + name_size as usize)
        .ok_or_else(|| {
            bad(format!(
                "id string at {id_off} runs past the end ({} bytes)",
                b.len()
            ))
        })?;
    let desc_len = DESC_FIXED_LEN + name_size as usize;
    let mut stats = Vec::with_capacity(num_desc as usize);
    for i in 0..num_desc as usize {
        let at = desc_off as usize + i * desc_len;
        let d = b.get(at..at + desc_len).ok_or_else(|| {
            bad(format!(
                "descriptor {i} at {at} runs past the end ({} bytes)",
                b.len()
            ))
        })?;
        let flags = u32_at(d, 0).unwrap_or(0);
        let exponent = i16::from_ne_bytes([d[4], d[5]]);
        let size = u16::from_ne_bytes([d[6], d[7]]) as usize;
        let offset = u32_at(d, 8).unwrap_or(0) as usize;
        let bucket_size = u32_at(d, 12).unwrap_or(0);
        let name = cstr(&d[DESC_FIXED_LEN..]);
        let start = data_off as usize + offset;
        let raw = b.get(start..start + 8 * size).ok_or_else(|| {
            bad(format!(
                "data of {name:?} ({size} values at {start}) runs past the end ({} bytes)",
                b.len()
            ))
        })?;
        let values = raw
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        stats.push(Stat {
            name,
            kind: match flags & 0xf {
                0 => StatKind::Cumulative,
                1 => StatKind::Instant,
                2 => StatKind::Peak,
                3 => StatKind::LinearHist,
                4 => StatKind::LogHist,
                _ => StatKind::Unknown,
            },
            unit: match (flags >> 4) & 0xf {
                0 => StatUnit::None,
                1 => StatUnit::Bytes,
                2 => StatUnit::Seconds,
                3 => StatUnit::Cycles,
                4 => StatUnit::Boolean,
                _ => StatUnit::Unknown,
            },
            base_pow2: (flags >> 8) & 0xf == 1,
            exponent,
            bucket_size,
            values,
        });
    }
    Ok(StatsFile {
        id: cstr(id),
        stats,
    })
}

/// _IO(KVMIO, 0xce), KVMIO = 0xAE.
pub const KVM_GET_STATS_FD: u64 = 0xAECE;

/// Whole content of a stats fd (the kernel returns 0 past the end).
pub fn read_fd(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n =
            nix::sys::uio::pread(fd, &mut buf, out.len() as i64).map_err(std::io::Error::from)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
        if out.len() > 16 << 20 {
            return Err(std::io::Error::other("stats file larger than 16 MiB"));
        }
    }
}

/// Makes a stats fd from a VM or vCPU fd; works only in the VM's own process.
pub fn stats_fd_of(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new fd or -1.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: r is a fresh fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r) })
}

/// The KVM fds a process holds, by what /proc/<pid>/fd says they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvmFds {
    pub vm: Vec<i32>,
    pub vcpu: Vec<i32>,
    /// anon_inode:kvm-vm-stats and kvm-vcpu-stats.
    pub stats: Vec<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvmFdKind {
    Vm,
    Vcpu,
    Stats,
}

/// What an fd is, from its /proc/<pid>/fd link (the anon_inode names of
/// virt/kvm/kvm_main.c: "kvm-vm", "kvm-vcpu:%d", "kvm-vm-stats",
/// "kvm-vcpu-stats:%d").
pub fn classify(link: &str) -> Option<KvmFdKind> {
    let name = link.strip_prefix("anon_inode:")?;
    if name == "kvm-vm" {
        Some(KvmFdKind::Vm)
    } else if name == "kvm-vm-stats" || name.starts_with("kvm-vcpu-stats") {
        Some(KvmFdKind::Stats)
    } else if name.starts_with("kvm-vcpu:") {
        Some(KvmFdKind::Vcpu)
    } else {
        None
    }
}

pub fn kvm_fds(pid: u32) -> std::io::Result<KvmFds> {
    let mut out = KvmFds::default();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue; // closed meanwhile
        };
        match classify(&target.to_string_lossy()) {
            Some(KvmFdKind::Vm) => out.vm.push(fd),
            Some(KvmFdKind::Vcpu) => out.vcpu.push(fd),
            Some(KvmFdKind::Stats) => out.stats.push(fd),
            None => {}
        }
    }
    out.vm.sort_unstable();
    out.vcpu.sort_unstable();
    out.stats.sort_unstable();
    Ok(out)
}

/// A duplicate of another process's fd (pidfd_getfd(2), Linux 5.6; needs
/// PTRACE_MODE_ATTACH_REALCREDS over it).
fn getfd(pidfd: &std::os::fd::OwnedFd, fd: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: plain syscall; returns a new fd or -1.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: r is a fresh fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as i32) })
}

fn pidfd_open(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall; returns a new fd or -1.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: r is a fresh fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(r as i32) })
}

/// The raw stats files of a VMM process, and why others could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessStats {
    /// (fd number in the VMM, file content).
    pub files: Vec<(i32, Vec<u8>)>,
    /// One line per thing that did not work.
    pub problems: Vec<String>,
}

/// Reads every stats file reachable from `pid` (live machine only): stats
/// fds it holds, then, when it holds none for its VM fd, KVM_GET_STATS_FD on
/// that fd (which the kernel refuses unless `pid` is this process).
pub fn from_process(pid: u32) -> ProcessStats {
    use std::os::fd::AsFd;
    let mut out = ProcessStats::default();
    let fds = match kvm_fds(pid) {
        Ok(f) => f,
        Err(e) => {
            out.problems.push(format!(
                "/proc/{pid}/fd: {e} (needs root or the VMM's user)"
            ));
            return out;
        }
    };
    if fds.vm.is_empty() && fds.stats.is_empty() {
        out.problems
            .push("holds no KVM VM fd (not a KVM VM, or KVM not yet set up)".into());
        return out;
    }
    let pidfd = match pidfd_open(pid) {
        Ok(p) => p,
        Err(e) => {
            out.problems.push(format!("pidfd_open: {e}"));
            return out;
        }
    };
    for &fd in &fds.stats {
        match getfd(&pidfd, fd).and_then(|f| read_fd(f.as_fd())) {
            Ok(bytes) => out.files.push((fd, bytes)),
            Err(e) => out
                .problems
                .push(format!("stats fd {fd}: pidfd_getfd/read: {e}")),
        }
    }
    if !out.files.is_empty() {
        return out;
    }
    for &fd in fds.vm.iter().chain(&fds.vcpu) {
        let got = getfd(&pidfd, fd).and_then(|f| stats_fd_of(f.as_fd()));
        match got.and_then(|s| read_fd(s.as_fd())) {
            Ok(bytes) => out.files.push((fd, bytes)),
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                out.problems.push(format!(
                    "KVM_GET_STATS_FD on its VM fd {fd} from another process: {e} (KVM answers \
                     only the process that created the VM), and it holds no stats fd"
                ));
                return out;
            }
            Err(e) => {
                out.problems
                    .push(format!("fd {fd}: pidfd_getfd/KVM_GET_STATS_FD: {e}"));
                return out;
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stats file laid out as the kernel lays it out (binary_stats.c):
    /// header, id right after it, descriptors, then data.
    pub fn build(id: &str, name_size: u32, stats: &[(&str, u32, i16, u32, &[u64])]) -> Vec<u8> {
        let id_off = HEADER_LEN as u32;
        let desc_off = id_off + name_size;
        let desc_len = DESC_FIXED_LEN as u32 + name_size;
        let data_off = desc_off + desc_len * stats.len() as u32;
        let mut b = Vec::new();
        for v in [0, name_size, stats.len() as u32, id_off, desc_off, data_off] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let mut idb = id.as_bytes().to_vec();
        idb.resize(name_size as usize, 0);
        b.extend_from_slice(&idb);
        let mut offset = 0u32;
        for (name, flags, exp, bucket, values) in stats {
            b.extend_from_slice(&flags.to_ne_bytes());
            b.extend_from_slice(&exp.to_ne_bytes());
            b.extend_from_slice(&(values.len() as u16).to_ne_bytes());
            b.extend_from_slice(&offset.to_ne_bytes());
            b.extend_from_slice(&bucket.to_ne_bytes());
            let mut n = name.as_bytes().to_vec();
            n.resize(name_size as usize, 0);
            b.extend_from_slice(&n);
            offset += 8 * values.len() as u32;
        }
        for (_, _, _, _, values) in stats {
            for v in *values {
                b.extend_from_slice(&v.to_ne_bytes());
            }
        }
        b
    }

    #[test]
    fn parses_the_kernel_layout() {
        // x86 vCPU stats as 6.18 declares them: exits (cumulative), guest_mode
        // (instant, boolean), halt_poll_success_ns (cumulative, seconds, -9),
        // halt_wait_hist (log2 histogram, 32 buckets, ns).
        let mut hist = vec![0u64; 32];
        hist[5] = 222;
        let b = build(
            "kvm-10238/vcpu-1",
            48,
            &[
                ("exits", 0x0, 0, 0, &[7806]),
                ("guest_mode", 0x1 | 0x40, 0, 0, &[0]),
                ("halt_poll_success_ns", 0x20, -9, 0, &[40230]),
                ("halt_wait_hist", 0x4 | 0x20, -9, 0, &hist),
            ],
        );
        let f = parse(&b, "fd").unwrap();
        assert_eq!(f.id, "kvm-10238/vcpu-1");
        assert_eq!(f.vcpu(), Some(1));
        assert_eq!(f.stats.len(), 4);
        assert_eq!(f.stats[1].unit, StatUnit::Boolean);
        assert_eq!(f.stats[1].kind, StatKind::Instant);
        assert_eq!(
            (f.stats[2].unit, f.stats[2].exponent),
            (StatUnit::Seconds, -9)
        );
        assert_eq!(f.stats[3].kind, StatKind::LogHist);
        assert_eq!(f.stats[3].values[5], 222);
        let c = f.counters();
        assert_eq!(c["exits"], 7806);
        assert_eq!(c["halt_poll_success_ns"], 40230);
        assert!(!c.contains_key("guest_mode") && !c.contains_key("halt_wait_hist"));
        let vm = parse(&build("kvm-10238", 48, &[]), "fd").unwrap();
        assert_eq!((vm.id.as_str(), vm.vcpu()), ("kvm-10238", None));
    }

    #[test]
    fn fd_links() {
        assert_eq!(classify("anon_inode:kvm-vm"), Some(KvmFdKind::Vm));
        assert_eq!(classify("anon_inode:kvm-vcpu:3"), Some(KvmFdKind::Vcpu));
        assert_eq!(classify("anon_inode:kvm-vm-stats"), Some(KvmFdKind::Stats));
        assert_eq!(
            classify("anon_inode:kvm-vcpu-stats:3"),
            Some(KvmFdKind::Stats)
        );
        assert_eq!(classify("anon_inode:[eventfd]"), None);
        assert_eq!(classify("/dev/kvm"), None);
    }

    #[test]
    fn truncated_and_hostile_files_are_named_errors() {
        let b = build("kvm-1", 48, &[("exits", 0, 0, 0, &[1, 2])]);
        for cut in [0, 10, 30, 100, b.len() - 1] {
            let e = parse(&b[..cut], "/stealscope/kvm-stats/1/12").unwrap_err();
            assert!(
                e.to_string().starts_with("/stealscope/kvm-stats/1/12: "),
                "{e}"
            );
        }
        let mut huge = b.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(parse(&huge, "x")
            .unwrap_err()
            .to_string()
            .contains("num_desc"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = parse(&b, "x");
        }
    }
}
