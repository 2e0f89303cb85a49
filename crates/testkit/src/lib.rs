//! The one require/skip rule of every live test in the workspace (issue
//! 29): a test that cannot run here FAILS when `CI` is set to anything but
//! empty, `0` or `false` (`CI=1`, `CI=yes` and `CI=true` all enforce), and
//! otherwise skips, saying why on a `SKIPPED (not CI): ...` line.
//!
//! cargo test shows a passing test's stderr only with `--nocapture`, so a
//! skip is also appended, with the test's name, to the file named by
//! `STEALSCOPE_SKIP_LOG` when it is set: `scripts/test.sh` sets it, prints
//! how many tests skipped and why, and fails under CI if any did.

use std::io::Write;

/// The variable naming the file skips are appended to.
pub mod clock;
pub mod proc_stat;

pub const SKIP_LOG: &str = "STEALSCOPE_SKIP_LOG";

/// Whether CI asks every test to run.
pub fn ci() -> bool {
    enforces(std::env::var("CI").ok().as_deref())
}

fn enforces(ci: Option<&str>) -> bool {
    ci.is_some_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// True when `ok`; otherwise panics under CI, or skips with `what`.
#[track_caller]
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    skip(what);
    false
}

/// Skips the calling test with `what` as the reason: panics under CI,
/// else says so on stderr and in the skip log. The caller returns.
#[track_caller]
pub fn skip(what: &str) {
    if ci() {
        panic!("required in CI but unavailable: {what}");
    }
    eprintln!("SKIPPED (not CI): {what}");
    log_skip(what);
}

/// One line per skip: `<test name>: <reason>` (the test harness names
/// each test's thread after the test).
fn log_skip(what: &str) {
    let Some(path) = std::env::var_os(SKIP_LOG) else {
        return;
    };
    let thread = std::thread::current();
    let name = thread
        .name()
        .unwrap_or("a test outside the harness's threads");
    if let Err(e) = append(std::path::Path::new(&path), name, what) {
        eprintln!("{}: cannot record the skip: {e}", path.to_string_lossy());
    }
}

fn append(path: &std::path::Path, name: &str, what: &str) -> std::io::Result<()> {
    let line = format!("{name}: {}\n", what.replace('\n', " "));
    // One write with O_APPEND keeps the lines of parallel tests whole.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for v in ["true", "1", "yes", "True"] {
            assert!(enforces(Some(v)), "{v}");
        }
        for v in [None, Some(""), Some(" "), Some("0"), Some("false")] {
            assert!(!enforces(v), "{v:?}");
        }
    }

    #[test]
    fn each_skip_is_one_line_naming_the_test() {
        let path = std::env::temp_dir().join(format!("skiplog-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        append(&path, "a::b", "no qemu\n(testenv)").unwrap();
        append(&path, "a::c", "not root").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(text, "a::b: no qemu (testenv)\na::c: not root\n");
    }
}
