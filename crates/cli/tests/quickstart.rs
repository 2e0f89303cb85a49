//! The README's quickstarts, run as written. Every `console` block under
//! "## Quickstart" is one shell session: `$ ` lines are commands, the lines
//! after one are what it prints. Each command must exit 0 and print what the
//! README shows in shape: every line shown appears, in order, in the real
//! output (stdout and stderr, as on a terminal) once tokens holding a digit
//! are `#` and spaces are collapsed; `...` marks lines left out.
//!
//! The session runs in a scratch directory, with the tested binary first on
//! PATH, `/usr/share/stealscope` (where the package puts them) standing for
//! the checkout's deploy/ and scenarios/, in its own network namespace (its
//! `serve` on 127.0.0.1:9464 meets no other) and UTS namespace (hostname
//! `vm`, as in the README), and with a real QEMU TCG VM named `web1` from
//! testenv/ for the host operator's block.

mod common;
use common::testenv::{have_qemu, testenv, Vms};
use common::*;
use std::path::Path;
use std::process::Command;

/// One console block: its heading and (command, shown output) pairs.
struct Block {
    heading: String,
    steps: Vec<(String, Vec<String>)>,
}

fn quickstart_blocks(readme: &str) -> Vec<Block> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Quickstart"))
        .expect("README has a '## Quickstart' section");
    let mut blocks = Vec::new();
    let mut heading = String::new();
    let mut cur: Option<Block> = None;
    for line in section.lines() {
        if let Some(mut b) = cur.take() {
            if line.starts_with("```") {
                blocks.push(b);
            } else {
                if let Some(cmd) = line.strip_prefix("$ ") {
                    b.steps.push((cmd.to_string(), Vec::new()));
                } else if let Some(step) = b.steps.last_mut() {
                    step.1.push(line.to_string());
                }
                cur = Some(b);
            }
        } else if let Some(h) = line.strip_prefix("### ") {
            heading = h.to_string();
        } else if line == "```console" {
            cur = Some(Block {
                heading: heading.clone(),
                steps: Vec::new(),
            });
        }
    }
    blocks
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A line's shape: tokens with a digit become `#`, whitespace collapses.
fn shape(line: &str) -> String {
    line.split_whitespace()
        .map(|t| {
            if t.chars().any(|c| c.is_ascii_digit()) {
                "#"
            } else {
                t
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The shown lines that do not appear, in order, in the real output.
fn missing_lines(shown: &[String], real: &str) -> Vec<String> {
    let real: Vec<String> = real.lines().map(shape).collect();
    let mut at = 0;
    let mut missing = Vec::new();
    for line in shown {
        let want = shape(line);
        if want.is_empty() || want == "..." {
            continue;
        }
        match real[at..].iter().position(|r| *r == want) {
            Some(i) => at += i + 1,
            None => missing.push(line.clone()),
        }
    }
    missing
}

/// Runs a block as one shell session; returns (exit code, output) per step.
fn run_block(b: &Block, work: &Path, share: &Path, host: bool) -> Vec<(i32, String)> {
    // The README's machine is called "vm": so is this session's.
    let mut script = String::from("set -u\nip link set lo up\nhostname vm\nbg=\n");
    for (i, (cmd, _)) in b.steps.iter().enumerate() {
        let cmd = cmd.replace("/usr/share/stealscope", share.to_str().unwrap());
        script += &format!("{{ {cmd}\n}} >out.{i} 2>&1\necho $? >rc.{i}\n");
        if cmd.trim_end().ends_with('&') {
            // A server started in the background: give it time to listen.
            script += "bg=\"$bg $!\"\nsleep 2\n";
        }
    }
    script += "[ -z \"$bg\" ] || kill $bg\nwait\n";
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_stealscope"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Outside the host operator's block the session also gets its own PID
    // namespace: a VM like the README's runs no VMs, whatever else runs here.
    let mut ns = vec!["--net", "--uts"];
    if !host {
        ns.extend(["--pid", "--fork", "--mount", "--mount-proc"]);
    }
    let out = Command::new("unshare")
        .args(ns)
        .args(["sh", "-c", &script])
        .current_dir(work)
        .env("PATH", path)
        .output()
        .expect("unshare");
    assert!(
        out.status.success(),
        "{}: the session failed: {}",
        b.heading,
        String::from_utf8_lossy(&out.stderr)
    );
    (0..b.steps.len())
        .map(|i| {
            let rc = std::fs::read_to_string(work.join(format!("rc.{i}"))).unwrap_or_default();
            let text = std::fs::read_to_string(work.join(format!("out.{i}"))).unwrap_or_default();
            let text = text.replace(share.to_str().unwrap(), "/usr/share/stealscope");
            (rc.trim().parse().unwrap_or(-1), text)
        })
        .collect()
}

#[test]
fn readme_quickstarts_run_as_shown() {
    if !require(is_root(), "root (unshare --net --uts, QEMU VM)")
        || !require(have_qemu(), "qemu-system-x86_64 and testenv/setup.sh")
        || !require(have("promtool"), "promtool (apt install prometheus)")
        || !require(have("curl"), "curl")
    {
        return;
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks = quickstart_blocks(&readme);
    let headings: Vec<&str> = blocks.iter().map(|b| b.heading.as_str()).collect();
    assert!(
        blocks.len() >= 3,
        "three quickstarts expected: {headings:?}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let share = tmp.path().join("share");
    std::fs::create_dir(&share).unwrap();
    for (name, target) in [
        ("prometheus", "deploy/prometheus"),
        ("grafana", "deploy/grafana"),
        ("scenarios", "scenarios"),
    ] {
        std::os::unix::fs::symlink(repo().join(target), share.join(name)).unwrap();
    }
    let _vms = Vms;
    let mut failures = Vec::new();
    for (n, b) in blocks.iter().enumerate() {
        assert!(!b.steps.is_empty(), "{}: no commands", b.heading);
        let host = b.steps.iter().any(|(c, _)| c.contains("stealscope host"));
        if host {
            testenv("start-vm.sh", &["web1", "2", "--busy", "1"]);
        }
        let work = tmp.path().join(format!("block{n}"));
        std::fs::create_dir(&work).unwrap();
        let results = run_block(b, &work, &share, host);
        for ((cmd, shown), (rc, real)) in b.steps.iter().zip(&results) {
            eprintln!(
                "[{}] $ {cmd}: exit {rc}, {} lines",
                b.heading,
                real.lines().count()
            );
            if *rc != 0 {
                failures.push(format!("[{}] `{cmd}` exited {rc}:\n{real}", b.heading));
                continue;
            }
            let missing = missing_lines(shown, real);
            if !missing.is_empty() {
                failures.push(format!(
                    "[{}] `{cmd}`: README lines not in the output (in shape):\n  {}\noutput:\n{real}",
                    b.heading,
                    missing.join("\n  ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn shapes_ignore_figures_not_words() {
    assert_eq!(
        shape("cpu3  steal 12.5 %  (6.1.0-28) ok"),
        "# steal # % # ok"
    );
    let shown = vec!["a 1".to_string(), "...".to_string(), "c 3".to_string()];
    assert!(missing_lines(&shown, "a 9\nb\nc 10.5\n").is_empty());
    assert_eq!(missing_lines(&shown, "c 3\na 1\n"), vec!["c 3".to_string()]);
}
