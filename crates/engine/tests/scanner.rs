//! The periodic host scanner against a real process that looks like a VMM
//! (comm "qemu-system-x86", threads "CPU n/KVM"), which then exits mid-scan.

use std::io::BufRead;
use std::process::{Command, Stdio};
use stealscope_engine::host::HostScanner;

const FAKE_VMM: &str = r#"
import ctypes, threading, sys, time
libc = ctypes.CDLL(None)
def name(n): libc.prctl(15, n.encode(), 0, 0, 0)
name("qemu-system-x86")
def vcpu(i):
    name(f"CPU {i}/KVM")
    end = time.time() + 0.2
    while time.time() < end: pass
    time.sleep(3600)
for i in range(4): threading.Thread(target=vcpu, args=(i,), daemon=True).start()
time.sleep(0.3)
print("ready", flush=True)
sys.stdin.readline()
"#;

#[test]
fn scanner_follows_threads_and_drops_an_exited_vm() {
    let mut child = Command::new("python3")
        .args(["-c", FAKE_VMM])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = child.id();
    let mut sc = HostScanner::discover(std::path::Path::new("/")).unwrap();
    let vm = sc
        .vms
        .iter()
        .find(|v| v.pid == pid)
        .expect("fake VMM discovered");
    let vcpus = vm
        .threads
        .iter()
        .filter(|t| matches!(t.role, stealscope_model::host::ThreadRole::Vcpu(_)))
        .count();
    assert_eq!(vcpus, 4);
    let mut out = Vec::new();
    sc.scan(&mut out);
    let ours: Vec<_> = out.iter().filter(|s| s.pid == pid).collect();
    assert!(ours.len() >= 5, "vCPUs and the main thread: {}", ours.len());
    // The vCPUs spun 200 ms each (sharing Python's GIL): run time is visible.
    let vcpu_run: u64 = ours
        .iter()
        .filter(|s| matches!(s.role, stealscope_model::host::ThreadRole::Vcpu(_)))
        .map(|s| s.sched.run_ns)
        .sum();
    assert!(vcpu_run > 50_000_000, "vCPU run time {vcpu_run} ns");
    child.kill().unwrap();
    child.wait().unwrap();
    sc.scan(&mut out);
    let left: Vec<_> = out.iter().filter(|s| s.pid == pid).collect();
    assert!(left.is_empty(), "exited VM dropped: {left:?}");
    assert!(sc.vms.iter().all(|v| v.pid != pid));
}
