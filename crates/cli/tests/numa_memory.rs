//! OOM safety of `place move-memory` in a real two-node kernel: a QEMU TCG
//! guest with two NUMA nodes runs the test build of stealscope and of a
//! memory hog (crates/cli/examples/numa_hog.rs) through
//! testenv/guest/numa-memory.sh, which reports over the serial console:
//! (a) node 1 filled so the hog does not fit: refused with the numbers,
//!     exit 2, nothing moved; (b) room again: moved in several steps and
//!     numa_maps shows the pages on node 1; (c) a hog whose own policy binds
//!     its memory to node 0: refused naming the policy, nothing moved,
//!     though node 1 has room. Expectations come from what the
//!     guest reports (node free memory, the hog's numa_maps), not constants.

mod common;
use common::testenv;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use stealscope_readers::numa::parse_numa_maps;

const VM: &str = "numamem";
const MIB: f64 = 1024.0 * 1024.0;
/// The config the guest's stealscope runs with: margin 16 MiB, 4 MiB steps.
const MARGIN_MIB: f64 = 16.0;
const STEP_MIB: u64 = 4;
const CONFIG: &str = "mem_margin_pct = 0.0\nmem_margin_min_mib = 16\nmem_step_mib = 4\n";
/// Size of the process to move (the guest leaves about this much free on node 1 for (a)).
const HOG_MIB: u64 = 24;

fn cache() -> PathBuf {
    std::env::var_os("STEALSCOPE_TESTENV_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/stealscope-testenv"))
}

/// The test build's own stealscope and numa_hog (an example of this crate,
/// which `cargo test` builds): testenv's initramfs brings their shared
/// libraries and strips their debug info, so no second build is needed.
fn binaries() -> (PathBuf, PathBuf) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_stealscope"));
    let hog = bin.parent().expect("target dir").join("examples/numa_hog");
    assert!(
        hog.is_file(),
        "{} missing: run through `cargo test` (it builds this crate's examples)",
        hog.display()
    );
    (bin, hog)
}

/// The guest's "NUMAMEM ..." lines and the numa_maps blocks between them.
struct Guest {
    lines: Vec<String>,
}

impl Guest {
    fn line(&self, key: &str) -> &str {
        let prefix = format!("NUMAMEM {key} ");
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| {
                panic!(
                    "no {prefix:?} line in the guest output:\n{}",
                    self.lines.join("\n")
                )
            })
    }

    fn all(&self, key: &str) -> Vec<&str> {
        let prefix = format!("NUMAMEM {key} ");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .collect()
    }

    /// A numa_maps block; `anon`: only the anonymous mappings (what a VM's
    /// memory is). The shared libraries' pages stay: they are file pages of
    /// the initramfs, and libc is also mapped by stealscope (mapmax=2), which
    /// move_pages leaves alone without MPOL_MF_MOVE_ALL.
    fn numa_maps_text(&self, name: &str, anon: bool) -> String {
        let begin = format!("NUMAMEM {name}-NUMA-MAPS-BEGIN");
        let end = format!("NUMAMEM {name}-NUMA-MAPS-END");
        let text: Vec<&str> = self
            .lines
            .iter()
            .skip_while(|l| **l != begin)
            .skip(1)
            .take_while(|l| **l != end)
            .map(String::as_str)
            .filter(|l| !anon || !l.contains(" file="))
            .collect();
        assert!(!text.is_empty(), "no {name} numa_maps block");
        text.join("\n")
    }

    /// The hog's bytes per node from a numa_maps block.
    fn numa_maps(&self, name: &str) -> BTreeMap<u32, u64> {
        parse_numa_maps(&self.numa_maps_text(name, false))
    }

    fn numa_maps_anon(&self, name: &str) -> BTreeMap<u32, u64> {
        parse_numa_maps(&self.numa_maps_text(name, true))
    }

    /// Node 1's MemFree in bytes from a "nodes" line.
    fn node1_free(&self, key: &str) -> f64 {
        let l = self.line(key);
        let v = l
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("free_kb="))
            .nth(1)
            .unwrap_or_else(|| panic!("no node1 free_kb in {l:?}"));
        v.parse::<f64>().unwrap() * 1024.0
    }
}

/// "needed 25.1 MiB" -> bytes.
fn mib_after(msg: &str, word: &str) -> f64 {
    let rest = msg
        .split(word)
        .nth(1)
        .unwrap_or_else(|| panic!("no {word:?} in {msg:?}"));
    rest.split_whitespace()
        .next()
        .unwrap()
        .parse::<f64>()
        .unwrap()
        * MIB
}

fn off_node1(m: &BTreeMap<u32, u64>) -> f64 {
    m.iter()
        .filter(|(n, _)| **n != 1)
        .map(|(_, b)| *b)
        .sum::<u64>() as f64
}

fn run_guest() -> Guest {
    let (stealscope, hog) = binaries();
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("numa-memory.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let script = repo().join("testenv/guest/numa-memory.sh");
    let _vms = testenv::Vms;
    let started = Instant::now();
    let mut args: Vec<String> = vec![
        VM.into(),
        "2".into(),
        "--numa2".into(),
        "--mem".into(),
        "512".into(),
    ];
    for f in [&stealscope, &hog, &script, &config] {
        args.push("--extra".into());
        args.push(f.display().to_string());
    }
    args.push("--cmdline".into());
    args.push(format!(
        "run=/bin/numa-memory.sh poweroff=1 numamem_hog={HOG_MIB}"
    ));
    let out = Command::new(repo().join("testenv/start-vm.sh"))
        .args(&args)
        .env("STEALSCOPE_TESTENV_RUN", testenv::run_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "start-vm.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = Path::new(&testenv::run_dir()).join(VM).join("serial.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    let text = loop {
        let t = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).replace('\r', "");
        if t.contains("NUMAMEM DONE") || t.contains("STEALSCOPE-RUN-EXIT") {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "no NUMAMEM DONE in {} after 120 s:\n{t}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "guest boot and scenario: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(
        text.contains("NUMAMEM DONE"),
        "the guest script ended early:\n{}",
        lines
            .iter()
            .rev()
            .take(40)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    Guest { lines }
}

#[test]
fn memory_move_refused_without_room_and_stepped_with_room() {
    let have = is_root()
        && repo().join("testenv/start-vm.sh").exists()
        && cache().join("vmlinuz").exists()
        && Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_ok();
    if !require(
        have,
        "root, qemu-system-x86_64 and the cached guest kernel (run testenv/setup.sh)",
    ) {
        return;
    }
    let g = run_guest();
    let hog_pid: u32 = g
        .line("STARTED")
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .expect("hog pid");

    // (a) Node 1 has about HOG_MIB free: the move must be refused.
    let before_a = g.numa_maps("A-BEFORE");
    let need_a = off_node1(&before_a);
    assert!(
        need_a >= HOG_MIB as f64 * MIB,
        "hog not on node 0: {before_a:?}"
    );
    let free_a = g.node1_free("A");
    // The guest's own numbers say it does not fit (independent of stealscope).
    assert!(
        need_a > free_a - MARGIN_MIB * MIB,
        "scenario (a) is not short of room: need {need_a}, free {free_a}"
    );
    assert_eq!(g.line("A-RC"), "2", "exit code of the refused move");
    let err = g.line("A-ERR");
    assert!(
        err.starts_with(&format!("stealscope: refused: pid {hog_pid} to node 1: ")),
        "{err}"
    );
    assert!(err.contains("does not fit in node 1"), "{err}");
    assert_eq!(g.all("A-ERR").len(), 1, "one line: {:?}", g.all("A-ERR"));
    // The message's numbers are the guest's (0.05 MiB of rounding; free
    // memory moves a little between the two reads).
    assert!(
        (mib_after(err, "needed ") - need_a).abs() <= 0.05 * MIB,
        "{err} vs {need_a}"
    );
    assert!(
        (mib_after(err, "free ") - free_a).abs() <= 4.0 * MIB,
        "{err} vs free {free_a}"
    );
    assert!(
        (mib_after(err, "margin ") - MARGIN_MIB * MIB).abs() < 0.05 * MIB,
        "{err}"
    );
    for word in ["MemTotal", "swap", "memory PSI"] {
        assert!(err.contains(word), "{word} missing in {err}");
    }
    assert_eq!(g.line("A-JSON").trim(), "", "no report on refusal");
    assert_eq!(
        g.numa_maps("A-AFTER"),
        before_a,
        "a refused move moved pages"
    );

    // (b) The filler is gone: the move goes through in steps.
    let before_b = g.numa_maps("B-BEFORE");
    let need_b = off_node1(&before_b);
    let free_b = g.node1_free("B");
    assert!(
        need_b <= free_b - MARGIN_MIB * MIB,
        "scenario (b) lacks room: need {need_b}, free {free_b}"
    );
    assert_eq!(g.line("B-RC"), "0", "stderr: {:?}", g.all("B-ERR"));
    let r: Value = serde_json::from_str(g.line("B-JSON")).expect("B-JSON");
    let steps = r["steps"].as_u64().unwrap();
    let moved = r["moved_bytes"].as_u64().unwrap() as f64;
    assert!(r["stopped"].is_null() && r["exited"] == false, "{r}");
    assert!(
        steps > 1 && steps as f64 >= need_b / (STEP_MIB as f64 * MIB),
        "{steps} steps for {need_b} bytes in {STEP_MIB} MiB steps"
    );
    let step_lines = g
        .all("B-ERR")
        .iter()
        .filter(|l| l.starts_with("step "))
        .count();
    assert_eq!(step_lines as u64, steps, "{:?}", g.all("B-ERR"));
    assert!(
        (r["checked"]["node_free_bytes"].as_f64().unwrap() - free_b).abs() <= 4.0 * MIB,
        "{r}"
    );
    let anon = g.numa_maps_anon("B-AFTER");
    let total: u64 = anon.values().sum();
    let on1 = anon.get(&1).copied().unwrap_or(0);
    assert!(
        on1 as f64 >= 0.95 * total as f64,
        "only {on1} of {total} anonymous bytes on node 1 after the move: {anon:?}"
    );
    let after_b = g.numa_maps("B-AFTER");
    let on1 = after_b.get(&1).copied().unwrap_or(0);
    // What stealscope says it moved is what numa_maps shows arriving on node 1...
    let arrived = on1 as f64 - before_b.get(&1).copied().unwrap_or(0) as f64;
    assert!(
        (arrived - moved).abs() <= 256.0 * 1024.0,
        "moved {moved}, arrived {arrived}"
    );
    // ...and what node 1's free memory lost (other allocations: a few MiB).
    let taken = free_b - g.node1_free("B-AFTER");
    assert!(
        (taken - moved).abs() <= 4.0 * MIB,
        "moved {moved}, node 1 free dropped {taken}"
    );

    // (c) A hog whose memory its own policy binds to node 0: refused, though
    // node 1 has room (the move would override the binding).
    let bound_pid: u32 = g
        .all("STARTED")
        .iter()
        .find(|l| l.starts_with("bound "))
        .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("pid=")))
        .and_then(|p| p.parse().ok())
        .expect("bound hog pid");
    let text_c = g.numa_maps_text("C-BEFORE", true);
    assert!(
        text_c.lines().any(|l| l.contains(" bind:0 ")),
        "the bound hog's numa_maps shows no bind:0:\n{text_c}"
    );
    let before_c = g.numa_maps("C-BEFORE");
    assert!(
        off_node1(&before_c) <= g.node1_free("C") - MARGIN_MIB * MIB,
        "scenario (c) lacks room, so it would not test the policy: {before_c:?}"
    );
    assert_eq!(g.line("C-RC"), "2", "exit code: {:?}", g.all("C-ERR"));
    let err = g.line("C-ERR");
    assert!(
        err.starts_with(&format!("stealscope: refused: pid {bound_pid} to node 1: ")),
        "{err}"
    );
    assert!(err.contains("its own NUMA policy bind:0"), "{err}");
    assert_eq!(g.all("C-ERR").len(), 1, "one line: {:?}", g.all("C-ERR"));
    assert_eq!(
        g.numa_maps("C-AFTER"),
        before_c,
        "a move refused for the policy moved pages"
    );
}
