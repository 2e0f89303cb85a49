//! KVM statistics for real, on this machine's /dev/kvm (here the kvm_pvm
//! backend: VMs can be created, Debian kernels cannot boot in them):
//! - the binary stats parser on the kernel's own bytes (a VM this test owns);
//! - the monitoring path: a stats fd another process holds, read through
//!   pidfd_getfd; and the kernel refusing KVM_GET_STATS_FD on another
//!   process's VM fd (EIO), which the report must say;
//! - `stealscope host` on a real `qemu -accel kvm` VM: kind, vCPU threads
//!   through QMP equal QMP's, KVM counters through QMP query-stats equal
//!   what QMP reports to an independent client.

mod common;
use common::testenv::*;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use stealscope_readers::kvm_stats::{self, StatKind, StatUnit};

const KVM_CREATE_VM: u64 = 0xAE01;
const KVM_CREATE_VCPU: u64 = 0xAE41;

fn ioctl_fd(fd: i32, req: u64, arg: u64) -> std::io::Result<OwnedFd> {
    // SAFETY: KVM ioctls taking an integer argument and returning a new fd.
    let r = unsafe { libc::ioctl(fd, req as _, arg) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: r is a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// A VM (and one vCPU) of this process, if /dev/kvm lets us make one.
fn own_vm() -> Option<(OwnedFd, OwnedFd, OwnedFd)> {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .ok()?;
    let kvm = OwnedFd::from(kvm);
    let vm = ioctl_fd(kvm.as_raw_fd(), KVM_CREATE_VM, 0).ok()?;
    let vcpu = ioctl_fd(vm.as_raw_fd(), KVM_CREATE_VCPU, 0).ok()?;
    Some((kvm, vm, vcpu))
}

#[test]
fn binary_stats_of_a_vm_we_own_parse_as_the_kernel_declares_them() {
    let vm = own_vm();
    if !require(vm.is_some(), "root and a /dev/kvm that creates VMs") {
        return;
    }
    let (_kvm, vm, vcpu) = vm.unwrap();
    let pid = std::process::id();
    // The id names the thread that created the VM or vCPU (task_pid_nr(current)).
    let tid = nix::unistd::gettid();
    let mut held = Vec::new();
    for (fd, id) in [
        (vm.as_fd(), format!("kvm-{tid}")),
        (vcpu.as_fd(), format!("kvm-{tid}/vcpu-0")),
    ] {
        let sfd = kvm_stats::stats_fd_of(fd).expect("KVM_GET_STATS_FD in the owner");
        let bytes = kvm_stats::read_fd(sfd.as_fd()).unwrap();
        held.push(sfd);
        // The header as read by hand: u32 num_desc at offset 8.
        let num_desc = u32::from_ne_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let f = kvm_stats::parse(&bytes, "stats fd").unwrap();
        assert_eq!(f.id, id);
        assert_eq!(f.stats.len(), num_desc);
        let mut names: Vec<&str> = f.stats.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), num_desc, "names unique and non-empty");
        assert!(f
            .stats
            .iter()
            .all(|s| !s.name.is_empty() && !s.values.is_empty()));
        let get = |n: &str| f.stats.iter().find(|s| s.name == n);
        if f.vcpu().is_none() {
            // KVM_GENERIC_VM_STATS: remote_tlb_flush, cumulative.
            let s = get("remote_tlb_flush").expect("generic VM stat");
            assert_eq!(s.kind, StatKind::Cumulative);
        } else {
            // KVM_GENERIC_VCPU_STATS and x86's vCPU stats (kvm_main.c, x86.c).
            assert_eq!(f.vcpu(), Some(0));
            assert_eq!(get("exits").unwrap().kind, StatKind::Cumulative);
            let h = get("halt_wait_hist").unwrap();
            assert_eq!(
                (h.kind, h.unit, h.exponent),
                (StatKind::LogHist, StatUnit::Seconds, -9)
            );
            assert_eq!(h.values.len(), 32, "LOGHIST_BUCKET_COUNT_LARGE");
            let g = get("guest_mode").unwrap();
            assert_eq!((g.kind, g.unit), (StatKind::Instant, StatUnit::Boolean));
            assert_eq!(f.counters()["exits"], 0, "a vCPU that never ran");
        }
    }
    // Their /proc/<pid>/fd links are what the live reader looks for
    // ("kvm-vm-stats", "kvm-vcpu-stats:0"), and so are the VM and vCPU fds.
    let fds = kvm_stats::kvm_fds(pid).unwrap();
    for s in &held {
        assert!(fds.stats.contains(&s.as_raw_fd()), "{fds:?}");
    }
    assert!(fds.vm.contains(&vm.as_raw_fd()) && fds.vcpu.contains(&vcpu.as_raw_fd()));
    drop(held);
    // The owner path of the live reader: our own VM fd answers.
    let mine = kvm_stats::from_process(pid);
    assert!(mine.problems.is_empty(), "{:?}", mine.problems);
    assert!(!mine.files.is_empty());
}

const HOLDER: &str = r#"
import fcntl, os, struct, sys
kvm = os.open("/dev/kvm", os.O_RDWR)
vm = fcntl.ioctl(kvm, 0xAE01, 0)
stats = fcntl.ioctl(vm, 0xAECE) if sys.argv[1] == "stats" else -1
h = struct.unpack("<6I", os.pread(stats, 24, 0)) if stats >= 0 else ()
print(os.getpid(), stats, *h, flush=True)
sys.stdin.read()
"#;

/// A python3 process holding a KVM VM (and a stats fd when `stats`).
struct Holder(std::process::Child);
impl Holder {
    fn start(stats: bool) -> (Holder, Vec<u64>) {
        let mut c = Command::new("python3")
            .args(["-c", HOLDER, if stats { "stats" } else { "vm" }])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v = line
            .split_whitespace()
            .map(|x| x.parse::<i64>().unwrap() as u64)
            .collect();
        (Holder(c), v)
    }
}
impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.stdin.as_mut().map(|s| s.write_all(b"x"));
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

#[test]
fn another_process_stats_fd_is_read_and_its_vm_fd_is_refused() {
    if !require(own_vm().is_some(), "root and a /dev/kvm that creates VMs") {
        return;
    }
    // A process that keeps a stats fd: we read it through pidfd_getfd.
    let (_h, v) = Holder::start(true);
    let (pid, stats_fd, num_desc) = (v[0] as u32, v[1] as i32, v[4] as usize);
    let got = kvm_stats::from_process(pid);
    assert!(got.problems.is_empty(), "{:?}", got.problems);
    assert_eq!(got.files.len(), 1);
    assert_eq!(got.files[0].0, stats_fd);
    let f = kvm_stats::parse(&got.files[0].1, "held").unwrap();
    assert_eq!(f.id, format!("kvm-{pid}"));
    assert_eq!(f.stats.len(), num_desc, "header as the holder read it");
    // A process with only its VM fd: KVM refuses the ioctl from another
    // mm (kvm_vm_ioctl: EIO), and the reason names it.
    let (_h2, v2) = Holder::start(false);
    let got = kvm_stats::from_process(v2[0] as u32);
    assert!(got.files.is_empty());
    let why = got.problems.join(" ");
    assert!(
        why.contains(&format!("os error {}", libc::EIO)) && why.contains("KVM_GET_STATS_FD"),
        "{why}"
    );
}

#[test]
fn real_qemu_kvm_vm_through_qmp_and_query_stats() {
    if !require(
        have_qemu() && own_vm().is_some(),
        "root, qemu-system-x86_64 and a /dev/kvm that creates VMs",
    ) {
        return;
    }
    let _vms = Vms;
    let dir = format!("{}/hkK", run_dir());
    std::fs::create_dir_all(&dir).unwrap();
    let sock = format!("{dir}/qmp.sock");
    let _ = std::fs::remove_file(&sock);
    // Paused (-S): KVM VM and vCPUs exist, nothing runs, counters stay put.
    let st = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "kvm",
            "-name",
            "hkK,debug-threads=on",
            "-smp",
            "2",
            "-m",
            "64",
        ])
        .args(["-nodefaults", "-display", "none", "-S"])
        .args(["-qmp", &format!("unix:{sock},server=on,wait=off")])
        .args(["-daemonize", "-pidfile", &format!("{dir}/qemu.pid")])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let pid: u64 = std::fs::read_to_string(format!("{dir}/qemu.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let qtids = qmp_tids(&sock);
    let tmp = tempfile::tempdir().unwrap();
    let snap = tmp.path().join("s");
    let r = json(&run(&[
        "host",
        "--json",
        "--interval",
        "1s",
        "--save-snapshot",
        snap.to_str().unwrap(),
    ]));
    let v = r["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("hkK not found: {r}"));
    assert_eq!(v["kind"], "qemu-kvm");
    assert_eq!(v["vcpu_source"], "qmp");
    assert_eq!(report_vcpu_tids(v), qtids);
    assert_eq!(v["kvm"]["source"], "QMP query-stats", "{v}");
    assert_eq!(v["kvm"]["interval"]["exits"], 0, "paused: no exits");
    let b = &r["kvm_binary_stats"];
    assert!(b["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["pid"].as_u64() == Some(pid) && e["vcpus"] == 2));
    // What we stored is what QEMU tells an independent client.
    let theirs = qmp(&sock, "query-stats", Some(r#"{"target": "vcpu"}"#));
    let stored: serde_json::Value = serde_json::from_slice(
        &std::fs::read(snap.join(format!("t1/stealscope/qmp/{pid}.json"))).unwrap(),
    )
    .unwrap();
    let exits = |v: &serde_json::Value| -> Vec<u64> {
        let mut e: Vec<u64> = v
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["provider"] == "kvm")
            .map(|x| {
                x["stats"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["name"] == "exits")
                    .unwrap()["value"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        e.sort_unstable();
        e
    };
    assert_eq!(
        exits(&stored["replies"]["query-stats vcpu"]),
        exits(&theirs)
    );
    // The stats-fd route was tried and refused by the kernel, as recorded.
    let why =
        std::fs::read_to_string(snap.join(format!("t1/stealscope/kvm-stats/{pid}/problems.json")))
            .unwrap();
    assert!(why.contains("KVM_GET_STATS_FD"), "{why}");
    qmp(&sock, "quit", None);
}
