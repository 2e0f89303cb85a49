//! move_with on fixture files and a fake process: the arithmetic of the
//! checks, the refusal and stop messages, steps, and no panic on garbage.

use super::pages::fake::FakeProcess;
use super::*;
use std::cell::RefCell;
use std::rc::Rc;
use stealscope_readers::MemFs;

const PID: u32 = 42;
const MIB: u64 = 1 << 20;
const NODE1: &str = "/sys/devices/system/node/node1/meminfo";

fn limits() -> MoveLimits {
    MoveLimits {
        margin_pct: 5.0,
        margin_min_bytes: 16 * MIB,
        step_bytes: 4 * MIB,
        psi_stop: 10.0,
        swap_headroom: 1.0,
    }
}

fn node_meminfo(node: u32, total_mib: u64, free_mib: u64) -> String {
    format!(
        "Node {node} MemTotal:       {} kB\nNode {node} MemFree:        {} kB\nNode {node} MemUsed:        {} kB\n",
        total_mib * 1024,
        free_mib * 1024,
        (total_mib - free_mib) * 1024
    )
}

fn meminfo(swap_total_mib: u64, swap_free_mib: u64) -> String {
    format!(
        "MemTotal: 2048000 kB\nMemFree: 1024000 kB\nMemAvailable: 1500000 kB\nBuffers: 1000 kB\n\
         Cached: 2000 kB\nSwapCached: 0 kB\nActive: 3000 kB\nInactive: 4000 kB\n\
         SwapTotal: {} kB\nSwapFree: {} kB\nDirty: 0 kB\nWriteback: 0 kB\nMapped: 500 kB\n\
         Slab: 600 kB\nCommitted_AS: 7000 kB\nVmallocTotal: 34359738367 kB\nVmallocUsed: 100 kB\n\
         VmallocChunk: 0 kB\n",
        swap_total_mib * 1024,
        swap_free_mib * 1024
    )
}

fn psi(avg10: f64) -> String {
    format!(
        "some avg10={avg10:.2} avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
}

/// A process with `anon_mib` of anonymous memory on node 0 (one mapping),
/// a 1 MiB shared library mapping on node 0 whose pages are shared (EACCES)
/// and 2 MiB already on node 1; the fixture files describe the same pages.
fn process(anon_mib: u64) -> (MemFs, FakeProcess) {
    let mut p = FakeProcess::default();
    let anon = 0x7f00_0000_0000u64;
    let lib = 0x7f10_0000_0000u64;
    let there = 0x7f20_0000_0000u64;
    let pages = |mib: u64| mib * MIB / 4096;
    for i in 0..pages(anon_mib) {
        p.pages.insert((anon + i * 4096) as usize, 0);
    }
    for i in 0..pages(1) {
        let a = (lib + i * 4096) as usize;
        p.pages.insert(a, 0);
        p.refuse.insert(a, -libc::EACCES);
    }
    for i in 0..pages(2) {
        p.pages.insert((there + i * 4096) as usize, 1);
    }
    let numa_maps = format!(
        "{anon:x} default anon={n} dirty={n} N0={n} kernelpagesize_kB=4\n\
         {lib:x} default file=/usr/lib/libc.so.6 mapped=256 mapmax=40 N0=256 kernelpagesize_kB=4\n\
         {there:x} default anon=512 dirty=512 N1=512 kernelpagesize_kB=4\n\
         7ffff7fc1000 default\n",
        n = pages(anon_mib)
    );
    let maps = format!(
        "{anon:x}-{:x} rw-p 00000000 00:00 0\n\
         {lib:x}-{:x} r-xp 00000000 08:01 1234 /usr/lib/libc.so.6\n\
         {there:x}-{:x} rw-p 00000000 00:00 0\n\
         7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0 [vvar]\n",
        anon + anon_mib * MIB,
        lib + MIB,
        there + 2 * MIB
    );
    let fs = MemFs::new("fixture")
        .with(&format!("/proc/{PID}/numa_maps"), numa_maps)
        .with(&format!("/proc/{PID}/maps"), maps)
        .with(NODE1, node_meminfo(1, 1024, 512))
        .with("/proc/meminfo", meminfo(0, 0))
        .with(PSI_MEMORY, psi(0.0));
    (fs, p)
}

fn run(
    fs: &MemFs,
    p: &mut FakeProcess,
    dry: bool,
) -> (Result<MoveReport, MemoryError>, Vec<String>) {
    let mut lines = Vec::new();
    let r = move_with(fs, p, PID, 1, &limits(), dry, &mut |l| {
        lines.push(l.to_string())
    });
    (r, lines)
}

fn refused(r: Result<MoveReport, MemoryError>) -> String {
    match r {
        Err(MemoryError::Refused(m)) => m,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn moves_in_steps_and_counts_shared_pages() {
    let (fs, mut p) = process(20);
    let (r, lines) = run(&fs, &mut p, false);
    let r = r.unwrap();
    // 20 MiB of anonymous memory plus the 1 MiB library were on node 0.
    assert_eq!(r.to_move_bytes, 21 * MIB);
    assert_eq!(r.moved_bytes, 20 * MIB);
    assert_eq!(r.failed_pages.get("EACCES"), Some(&256));
    // 4 MiB steps: 21 MiB of candidate pages -> 6 steps.
    assert_eq!(r.steps, 6);
    assert_eq!(p.moves, 6);
    assert!(r.stopped.is_none());
    assert!(p.pages.values().filter(|n| **n == 0).count() == 256);
    assert_eq!(lines.len(), 7, "{lines:#?}");
    assert!(lines[0].contains("checks passed"), "{}", lines[0]);
    // The fixture's numa_maps did not change: after = before.
    assert_eq!(r.after, r.before);
}

#[test]
fn dry_run_moves_nothing_and_says_what_would_move() {
    let (fs, mut p) = process(20);
    let r = run(&fs, &mut p, true).0.unwrap();
    assert!(r.dry_run);
    assert_eq!(p.moves, 0);
    assert_eq!(r.moved_bytes, 21 * MIB);
    assert_eq!(r.steps, 6);
    assert_eq!(r.checked.needed_bytes, 21 * MIB);
    // max(5% of 1024 MiB, 16 MiB)
    assert_eq!(r.checked.margin_bytes, (1024.0 * MIB as f64 * 0.05) as u64);
}

#[test]
fn refusal_when_it_does_not_fit_has_every_number() {
    let (mut fs, mut p) = process(40);
    // 1024 MiB node: margin = max(5% = 51.2 MiB, 16 MiB) = 51.2 MiB; free 90
    // leaves 38.8 MiB < 41 MiB to move.
    fs.insert(NODE1, node_meminfo(1, 1024, 90));
    let m = refused(run(&fs, &mut p, false).0);
    assert_eq!(p.moves, 0);
    for want in [
        "pid 42 to node 1",
        "41.0 MiB to move does not fit in node 1: free 90.0 MiB - margin 51.2 MiB leaves 38.8 MiB",
        "needed 41.0 MiB, free 90.0 MiB, margin 51.2 MiB (MemTotal 1024.0 MiB)",
        "no swap",
        "memory PSI some avg10 0.00 (stop above 10.00)",
    ] {
        assert!(m.contains(want), "{want:?} not in {m:?}");
    }
    assert!(!m.contains('\n'));
    // Dry runs refuse the same way.
    assert_eq!(refused(run(&fs, &mut p, true).0), m);
    // One MiB more room and it fits.
    fs.insert(NODE1, node_meminfo(1, 1024, 93));
    assert!(run(&fs, &mut p, true).0.is_ok());
}

#[test]
fn refusal_on_swap_headroom_and_pressure() {
    let (mut fs, mut p) = process(8);
    // Swap in use, 5 MiB free < 1.0 x 9 MiB.
    fs.insert("/proc/meminfo", meminfo(100, 5));
    let m = refused(run(&fs, &mut p, false).0);
    assert!(
        m.contains("swap is in use and free swap 5.0 MiB < 1.00 x 9.0 MiB to move"),
        "{m}"
    );
    assert!(m.contains("swap free 5.0 MiB of 100.0 MiB (in use"), "{m}");
    // Swap present but unused: no headroom needed.
    fs.insert("/proc/meminfo", meminfo(100, 100));
    assert!(run(&fs, &mut p, true).0.is_ok());
    // Free swap exactly the bytes to move is enough.
    fs.insert("/proc/meminfo", meminfo(100, 9));
    assert!(run(&fs, &mut p, true).0.is_ok());
    fs.insert(PSI_MEMORY, psi(12.5));
    let m = refused(run(&fs, &mut p, false).0);
    assert!(
        m.contains("memory pressure some avg10 12.50 > stop 10.00"),
        "{m}"
    );
    // No PSI in the kernel: not checked, and said so.
    fs.files.remove(PSI_MEMORY);
    let r = run(&fs, &mut p, true).0.unwrap();
    assert_eq!(r.checked.psi_some_avg10, None);
    assert!(r.checked.summary(&limits()).contains("not checked"));
}

#[test]
fn missing_node_process_and_files() {
    let (mut fs, mut p) = process(8);
    let m = refused(move_with(&fs, &mut p, PID, 3, &limits(), true, &mut |_| {}));
    assert_eq!(
        m,
        "node 3 does not exist (/sys/devices/system/node/node3/meminfo is missing)"
    );
    assert!(matches!(
        move_with(&fs, &mut p, 7, 1, &limits(), false, &mut |_| {}),
        Err(MemoryError::Gone(7))
    ));
    fs.files.remove("/proc/meminfo");
    assert!(refused(run(&fs, &mut p, false).0).contains("/proc/meminfo is missing"));
    let (mut fs, mut p) = process(8);
    fs.insert(PSI_MEMORY, "some avg10=x\n");
    let e = run(&fs, &mut p, false).0.unwrap_err().to_string();
    assert!(e.starts_with("/proc/pressure/memory: "), "{e}");
}

#[test]
fn gone_before_and_during_the_move() {
    let (fs, mut p) = process(8);
    p.gone = true;
    assert!(matches!(
        run(&fs, &mut p, false).0,
        Err(MemoryError::Gone(PID))
    ));

    /// Exits after `after` move calls.
    struct ExitsLater(FakeProcess, usize);
    impl PageMover for ExitsLater {
        fn query(&mut self, a: &[usize], s: &mut [i32]) -> Result<(), Errno> {
            self.0.gone = self.0.moves >= self.1;
            self.0.query(a, s)
        }
        fn move_to(&mut self, a: &[usize], n: u32, s: &mut [i32]) -> Result<usize, Errno> {
            self.0.move_to(a, n, s)
        }
    }
    let (fs, p) = process(8);
    let mut k = ExitsLater(p, 2);
    let r = move_with(&fs, &mut k, PID, 1, &limits(), false, &mut |_| {}).unwrap();
    assert!(r.exited);
    assert_eq!(r.steps, 1);
    assert_eq!(r.moved_bytes, 4 * MIB);
    assert_eq!(
        r.stopped.as_deref(),
        Some("process 42 exited after 1 step(s), 4.0 MiB moved")
    );
}

/// A fixture that changes after a number of move calls: pressure rising or
/// another tenant taking the node's memory mid-move.
struct Changing {
    fs: Rc<RefCell<MemFs>>,
}

impl Source for Changing {
    fn read(&self, path: &str) -> stealscope_readers::Result<Option<Vec<u8>>> {
        self.fs.borrow().read(path)
    }
    fn list(&self, dir: &str) -> stealscope_readers::Result<Option<Vec<String>>> {
        self.fs.borrow().list(dir)
    }
    fn describe(&self) -> String {
        "changing".into()
    }
}

struct Hook {
    p: FakeProcess,
    fs: Rc<RefCell<MemFs>>,
    after_moves: usize,
    path: &'static str,
    content: String,
}

impl PageMover for Hook {
    fn query(&mut self, a: &[usize], s: &mut [i32]) -> Result<(), Errno> {
        self.p.query(a, s)
    }
    fn move_to(&mut self, a: &[usize], n: u32, s: &mut [i32]) -> Result<usize, Errno> {
        let r = self.p.move_to(a, n, s);
        if self.p.moves == self.after_moves {
            self.fs.borrow_mut().insert(self.path, &self.content);
        }
        r
    }
}

fn stops_after_two_steps(path: &'static str, content: String) -> MoveReport {
    let (fs, p) = process(20);
    let fs = Rc::new(RefCell::new(fs));
    let src = Changing { fs: fs.clone() };
    let mut k = Hook {
        p,
        fs,
        after_moves: 2,
        path,
        content,
    };
    let r = move_with(&src, &mut k, PID, 1, &limits(), false, &mut |_| {}).unwrap();
    assert_eq!(r.steps, 2);
    assert_eq!(r.moved_bytes, 8 * MIB);
    assert_eq!(k.p.moves, 2);
    r
}

#[test]
fn stops_when_pressure_rises_mid_move() {
    let r = stops_after_two_steps(PSI_MEMORY, psi(25.0));
    let s = r.stopped.unwrap();
    assert!(
        s.starts_with("stopped before step 3 with 8.0 MiB moved: memory pressure some avg10 25.00 > stop 10.00 ["),
        "{s}"
    );
    assert!(s.contains("needed 13.0 MiB"), "{s}");
}

#[test]
fn stops_when_the_node_fills_mid_move() {
    // 1024 MiB node, margin 51.2 MiB: 60 MiB free leaves 8.8 < 13 MiB still to move.
    let r = stops_after_two_steps(NODE1, node_meminfo(1, 1024, 60));
    let s = r.stopped.unwrap();
    assert!(
        s.contains("13.0 MiB to move does not fit in node 1: free 60.0 MiB - margin 51.2 MiB leaves 8.8 MiB"),
        "{s}"
    );
}

proptest::proptest! {
    #[test]
    fn never_panics_on_garbage(
        numa_maps in "\\PC{0,300}",
        maps in "\\PC{0,300}",
        node in "\\PC{0,120}",
        mem in "\\PC{0,120}",
        pressure in "\\PC{0,120}",
    ) {
        let fs = MemFs::new("garbage")
            .with(&format!("/proc/{PID}/numa_maps"), numa_maps)
            .with(&format!("/proc/{PID}/maps"), maps)
            .with(NODE1, node)
            .with("/proc/meminfo", mem)
            .with(PSI_MEMORY, pressure);
        let mut p = FakeProcess::default();
        let _ = move_with(&fs, &mut p, PID, 1, &limits(), false, &mut |_| {});
    }
}

#[test]
fn stops_when_a_check_cannot_be_made_mid_move() {
    let r = stops_after_two_steps(PSI_MEMORY, "some avg10=garbage\n".into());
    let s = r.stopped.unwrap();
    assert!(
        s.starts_with("stopped before step 3 with 8.0 MiB moved: /proc/pressure/memory: "),
        "{s}"
    );
}

#[test]
fn refuses_to_move_memory_against_its_own_policy() {
    let (mut fs, mut p) = process(20);
    let text = fs
        .read_text(&format!("/proc/{PID}/numa_maps"))
        .unwrap()
        .unwrap();
    // The anonymous mapping bound to node 0 by its owner (mbind / QEMU host-nodes).
    let bound = text.replacen(" default anon=", " bind=static:0 anon=", 1);
    fs.insert(&format!("/proc/{PID}/numa_maps"), bound.clone());
    let m = refused(run(&fs, &mut p, false).0);
    assert_eq!(p.moves, 0);
    for want in [
        "pid 42 to node 1: 20.0 MiB of its memory is under its own NUMA policy bind=static:0 (20.0 MiB)",
        "keeps it off node 1",
        "numatune",
    ] {
        assert!(m.contains(want), "{want:?} not in {m:?}");
    }
    assert!(!m.contains('\n'));
    // Dry runs refuse the same way.
    assert_eq!(refused(run(&fs, &mut p, true).0), m);
    // Interleaved over both nodes: moving it all to node 1 would undo that.
    let inter = text.replacen(" default anon=", " interleave:0-1 anon=", 1);
    fs.insert(&format!("/proc/{PID}/numa_maps"), inter);
    assert!(refused(run(&fs, &mut p, true).0).contains("interleave:0-1 (20.0 MiB)"));
    // A binding that includes node 1, or a preference for it, is no obstacle.
    for ok in [" bind:0-1 anon=", " prefer:1 anon=", " local anon="] {
        fs.insert(
            &format!("/proc/{PID}/numa_maps"),
            text.replacen(" default anon=", ok, 1),
        );
        assert!(run(&fs, &mut p, true).0.is_ok(), "{ok}");
    }
}
