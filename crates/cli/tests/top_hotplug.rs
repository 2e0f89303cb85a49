//! `stealscope top` while a CPU goes offline and comes back, for real (a
//! test binary of its own, so no other live test runs meanwhile): no crash,
//! the bars follow the online CPUs.

mod common;
use common::tmux::{have_tmux, Tmux};
use common::*;
use std::time::Duration;

/// Brings the CPU back online even if the test fails half-way.
struct Online(&'static str);
impl Drop for Online {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0, "1");
    }
}

fn has_bar(screen: &str, cpu: u32) -> bool {
    screen
        .lines()
        .any(|l| l.starts_with(&format!("cpu{cpu} ")) && l.contains(" busy "))
}

#[test]
fn bars_follow_a_cpu_going_offline_and_back() {
    let ctl = "/sys/devices/system/cpu/cpu1/online";
    let can = is_root() && std::path::Path::new(ctl).exists() && have_tmux();
    if !require(can, "root, tmux and a hot-pluggable cpu1") {
        return;
    }
    let _guard = Online(ctl);
    let t = Tmux::start(100, 30);
    t.type_line(&format!(
        "{} top; echo TOP''-EXIT=$?",
        env!("CARGO_BIN_EXE_stealscope")
    ));
    let wait = Duration::from_secs(20);
    t.wait_for("cpu0 and cpu1", wait, |s| has_bar(s, 0) && has_bar(s, 1));
    std::fs::write(ctl, "0").expect("offline cpu1");
    let s = t.wait_for("cpu1 gone", wait, |s| has_bar(s, 0) && !has_bar(s, 1));
    assert!(
        !s.lines().any(|l| l.starts_with("cpu1")),
        "cpu1 still drawn while offline:\n{s}"
    );
    std::fs::write(ctl, "1").expect("online cpu1");
    t.wait_for("cpu1 back", wait, |s| has_bar(s, 0) && has_bar(s, 1));
    assert!(t.alternate_on(), "top ended");
    t.keys(&["q"]);
    let s = t.wait_for("top's exit", wait, |s| {
        s.lines().any(|l| l.starts_with("TOP-EXIT="))
    });
    assert!(s.contains("TOP-EXIT=0"), "{s}");
}
