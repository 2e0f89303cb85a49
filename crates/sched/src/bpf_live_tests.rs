//! The BPF route's scale and identity (issue 29), against the running
//! kernel: needs root (the workspace's require rule, `stealscope_testkit`).
//! Inside the crate to see the map itself.

use super::BpfRoute;
use crate::route::RouteImpl;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The route, or None (skip) when this is not root outside CI.
fn route() -> Option<BpfRoute> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !stealscope_testkit::require(root, "root") {
        return None;
    }
    Some(BpfRoute::start().unwrap_or_else(|e| panic!("{e}")))
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// A thread spinning on CPU 1 until `stop`; its tid.
fn spinner(stop: &Arc<AtomicBool>) -> (u32, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = stop.clone();
    let h = std::thread::spawn(move || {
        pin_self(1);
        tx.send(gettid()).unwrap();
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    });
    (rx.recv().unwrap(), h)
}

fn pin_self(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

// 70,000 watched threads (65,536 is the least the issue asks; with 65,536
// slots this counted 4,465 unwatched) (fake tids beside two real spinners): all taken,
// and re-watching a larger set keeps the real victim's counters (inserts
// are BPF_NOEXIST; a reset would shrink its wait and episodes).
#[test]
fn seventy_thousand_threads_are_watched_and_rewatching_resets_none() {
    let Some(mut r) = route() else { return };
    let stop = Arc::new(AtomicBool::new(false));
    let (victim, h1) = spinner(&stop);
    let (_hog, h2) = spinner(&stop);
    r.watch(&[victim]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let a = r.read().unwrap();
    let mut many: Vec<u32> = (3_000_000..3_070_000).collect();
    many.push(victim);
    r.watch(&many).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let b = r.read().unwrap();
    stop.store(true, Ordering::Relaxed);
    assert_eq!(b.stats.unwatched, 0, "{:?}", b.stats);
    assert_eq!(b.threads.len(), 70_001);
    let (wa, wb) = (&a.threads[&victim], &b.threads[&victim]);
    assert!(wa.wait_ns() > 0, "the victim waited behind the hog");
    assert!(wb.wait_ns() >= wa.wait_ns(), "{wa:?} -> {wb:?}");
    assert!(wb.episodes.count >= wa.episodes.count);
    h1.join().unwrap();
    h2.join().unwrap();
}

// A victim's first culprits are charged in its own slots, the rest in the
// charges map, and every one is reported; the map is emptied of pairs that
// stopped growing, while the totals a sample reports keep them.
#[test]
fn culprits_past_the_slots_spill_and_idle_charges_leave_the_map() {
    let Some(mut r) = route() else { return };
    let stop = Arc::new(AtomicBool::new(false));
    let (victim, h1) = spinner(&stop);
    // More hogs than a victim has slots: at least two spill to the map.
    let hogs: Vec<(u32, std::thread::JoinHandle<()>)> = (0..crate::bpf_charges::NSLOT + 2)
        .map(|_| spinner(&stop))
        .collect();
    r.watch(&[victim]).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let a = r.read().unwrap();
    let entries = r.charge_entries();
    stop.store(true, Ordering::Relaxed);
    h1.join().unwrap();
    let hogs: Vec<u32> = hogs
        .into_iter()
        .map(|(t, h)| {
            h.join().unwrap();
            t
        })
        .collect();
    // The victim has exited: nothing charges it any more.
    let _ = r.read().unwrap();
    let c = r.read().unwrap();
    let hog_ns = |s: &stealscope_who::SchedSample, hog: u32| -> u64 {
        s.threads[&victim]
            .by_thread
            .iter()
            .filter(|(c, _)| c.tid == hog)
            .map(|(_, &ns)| ns)
            .sum()
    };
    assert!(entries > 0, "some culprits spilled to the map");
    assert_eq!(r.charge_entries(), 0, "idle pairs pruned (had {entries})");
    for &hog in &hogs {
        assert!(
            hog_ns(&a, hog) > 0,
            "hog {hog} charged: {:?}",
            a.threads[&victim]
        );
        assert!(
            hog_ns(&c, hog) >= hog_ns(&a, hog),
            "totals kept after the prune"
        );
    }
}

// A culprit that execs is named by its new comm from then on: the same
// tid appears under both names (keyed by tid alone, the first stuck).
#[test]
fn a_culprit_that_execs_is_charged_under_its_new_name() {
    let Some(mut r) = route() else { return };
    let stop = Arc::new(AtomicBool::new(false));
    let (victim, h1) = spinner(&stop);
    let mut child = std::process::Command::new("taskset")
        .args(["-c", "1", "sh", "-c"])
        .arg("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec yes")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("taskset");
    let pid = child.id();
    r.watch(&[victim]).unwrap();
    // The loop takes about a second here; then `yes` spins.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() != "yes") {
        assert!(std::time::Instant::now() < deadline, "sh never exec'd");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let s = r.read().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    stop.store(true, Ordering::Relaxed);
    h1.join().unwrap();
    let names: Vec<&str> = s.threads[&victim]
        .by_thread
        .keys()
        .filter(|c| c.tid == pid)
        .map(|c| c.comm.as_str())
        .collect();
    assert!(names.contains(&"sh"), "{names:?}");
    assert!(names.contains(&"yes"), "{names:?}");
}
