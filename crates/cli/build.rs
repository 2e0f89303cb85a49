//! Puts the git commit the binary is built from into `--version`.
//! STEALSCOPE_GIT_COMMIT overrides it (a build from a source tarball has no
//! .git); without either it says "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

/// Only for files that exist: cargo reruns on every build for a missing one.
fn rerun_if_changed(path: Option<String>) {
    if let Some(p) = path.filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={p}");
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=STEALSCOPE_GIT_COMMIT");
    let commit = std::env::var("STEALSCOPE_GIT_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Rebuild when HEAD moves: HEAD itself (a branch switch) and the file
    // of the branch it names (a commit), wherever this worktree keeps them.
    for name in ["HEAD", "refs/heads"] {
        let path = match name {
            "HEAD" => git(&["rev-parse", "--git-path", "HEAD"]),
            _ => git(&["symbolic-ref", "-q", "HEAD"])
                .and_then(|r| git(&["rev-parse", "--git-path", &r])),
        };
        rerun_if_changed(path);
    }
    // packed-refs holds the branch after `git gc`.
    rerun_if_changed(git(&["rev-parse", "--git-path", "packed-refs"]));
    let commit = commit.unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=STEALSCOPE_GIT_COMMIT={commit}");
}
