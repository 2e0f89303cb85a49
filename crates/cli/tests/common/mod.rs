//! Shared helpers for the CLI integration tests.
#![allow(dead_code)]

pub mod chromium;
pub mod libvirt;
pub mod perf_raw;
pub mod place;
pub mod probes;
pub mod testenv;
pub mod tmux;
pub mod who;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stealscope"))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run stealscope")
}

/// The workspace's one require/skip rule (`stealscope_testkit`): tests
/// that need root, hotplug or QEMU fail under CI and skip with a printed
/// and logged reason on a developer machine that lacks them.
#[allow(unused_imports)]
pub use stealscope_testkit::{ci, require, skip};

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The command succeeded; else its exit status and stderr.
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn json(out: &Output) -> serde_json::Value {
    assert_ok(out);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

pub fn schema_validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(repo().join("schemas/doctor.schema.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("schema compiles")
}

pub fn assert_valid(v: &serde_json::Value) {
    let validator = schema_validator();
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "schema violations: {errors:#?}");
}

pub fn finding_ids(v: &serde_json::Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect()
}

/// The binary, copied where uid 65534 can execute it.
pub fn world_runnable_binary() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dst = dir.path().join("stealscope");
    std::fs::copy(env!("CARGO_BIN_EXE_stealscope"), &dst).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, dst)
}

/// `bin args` as uid/gid 65534 (nobody), not yet started.
pub fn nobody_command(bin: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin)
        .args(args)
        .current_dir("/");
    c
}

pub fn as_nobody(bin: &Path, args: &[&str]) -> Output {
    nobody_command(bin, args).output().expect("setpriv")
}

/// One side (`t0` or `t1`) of a packed snapshot fixture unpacked into a
/// temporary directory, for tests that need a real `--root` tree.
pub fn fixture_side(name: &str, side: &str) -> tempfile::TempDir {
    let path = repo()
        .join("fixtures/snapshots")
        .join(name)
        .join("snapshot.tar.gz");
    let snap = stealscope_readers::snapshot::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fs = if side == "t0" { &snap.t0 } else { &snap.t1 };
    let dir = tempfile::tempdir().unwrap();
    for (abs, data) in &fs.files {
        let p = dir.path().join(abs.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, data).unwrap();
    }
    dir
}
