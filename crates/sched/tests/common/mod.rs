//! The one require/skip rule of this crate's live tests (issue 29): a test
//! that cannot run here FAILS when `CI` is set to anything but empty, `0`
//! or `false` (`CI=1`, `CI=yes` and `CI=true` all enforce), and otherwise
//! skips, saying why on a `SKIPPED (not CI): ...` line.
//! (src/bpf_live_tests.rs applies the same rule inside the crate.)

/// Whether CI asks every test to run.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// True when `ok`; otherwise panics under CI and skips with `what`.
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if ci() {
        panic!("required in CI but unavailable: {what}");
    }
    eprintln!("SKIPPED (not CI): {what}");
    false
}
