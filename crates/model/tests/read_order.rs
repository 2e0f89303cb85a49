//! The order in which one side of an interval is read. A VM's cmdline and
//! numa_maps take its mmap lock and can wait seconds behind a busy VM; the
//! vCPU thread times must be read before them, next to the clock, or each
//! VM's window shifts against the clock that measures it (seen live: vCPUs
//! at 190 % of run plus wait).

use std::cell::RefCell;
use std::path::Path;
use stealscope_model::observation::{collect, Side};
use stealscope_readers::{snapshot, MemFs, ReadError, Source};

/// Passes reads through, keeping the order of the paths.
struct Logged {
    inner: MemFs,
    reads: RefCell<Vec<String>>,
}

impl Source for Logged {
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>, ReadError> {
        self.reads.borrow_mut().push(path.to_string());
        self.inner.read(path)
    }
    fn list(&self, dir: &str) -> Result<Option<Vec<String>>, ReadError> {
        self.inner.list(dir)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// A host with two pinned QEMU VMs and a few other processes.
fn pinned_host() -> snapshot::Snapshot {
    snapshot::open(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/snapshots/host-2node-pinned-qemu-img/snapshot.tar.gz"),
    )
    .unwrap()
}

#[test]
fn thread_times_come_right_after_the_clock_and_before_files_that_wait_for_a_vm() {
    let snap = pinned_host();
    for (side, fs) in [("t0", &snap.t0), ("t1", &snap.t1)] {
        let src = Logged {
            inner: fs.clone(),
            reads: RefCell::new(Vec::new()),
        };
        let obs = collect(&src, if side == "t0" { Side::Start } else { Side::End }).unwrap();
        let host = obs.host;
        let vcpus: usize = host.vms.iter().map(|v| v.vcpus.len()).sum();
        assert!(vcpus > 0, "{side}: the fixture has vCPUs");
        let reads = src.reads.into_inner();
        let pos = |f: &dyn Fn(&str) -> bool| reads.iter().position(|p| f(p));
        let uptime = pos(&|p| p == "/proc/uptime").expect("uptime read");
        let last_sched = reads
            .iter()
            .rposition(|p| p.ends_with("/schedstat") && p.contains("/task/"))
            .expect("thread schedstat read");
        let waits = |p: &str| {
            let of_process = p
                .strip_prefix("/proc/")
                .and_then(|r| r.split('/').next())
                .is_some_and(|x| x.bytes().all(|b| b.is_ascii_digit()));
            of_process && (p.ends_with("/cmdline") || p.ends_with("/numa_maps"))
        };
        if let Some(first_wait) = pos(&waits) {
            assert!(
                last_sched < first_wait,
                "{side}: {} read before the thread times ended",
                reads[first_wait]
            );
        }
        // Between the clock and the last thread time only the cheap files.
        for p in &reads[uptime + 1..=last_sched] {
            assert!(
                p.ends_with("/comm") || p.ends_with("/schedstat"),
                "{side}: {p} read between the clock and the thread times"
            );
        }
    }
}

/// With no VMM-looking process, a side reads every comm and no thread:
/// there are no vCPUs for other work to compete with (on a guest this was
/// most of a snapshot side's reads). The same processes with a VMM among
/// them have their threads read.
#[test]
fn without_a_vmm_no_thread_is_read() {
    let snap = pinned_host();
    let mut no_vmm = snap.t1.clone();
    let comms: Vec<String> = no_vmm
        .files
        .keys()
        .filter(|p| p.ends_with("/comm") && !p.contains("/task/"))
        .cloned()
        .collect();
    assert!(comms.len() > 1, "the fixture has processes");
    for p in &comms {
        no_vmm.files.insert(p.clone(), b"bash\n".to_vec());
    }
    for (fs, vmm) in [(&snap.t1, true), (&no_vmm, false)] {
        let src = Logged {
            inner: fs.clone(),
            reads: RefCell::new(Vec::new()),
        };
        let host = collect(&src, Side::End).unwrap().host;
        let reads = src.reads.into_inner();
        let threads = reads.iter().filter(|p| p.contains("/task/")).count();
        let comm_reads = reads.iter().filter(|p| comms.contains(p)).count();
        assert_eq!(comm_reads, comms.len(), "every comm is read");
        if vmm {
            assert!(
                threads > 0 && !host.vms.is_empty(),
                "{threads} thread reads"
            );
        } else {
            assert_eq!(threads, 0, "threads read without a VMM");
            assert!(host.vms.is_empty() && host.procs.is_empty());
        }
    }
}
