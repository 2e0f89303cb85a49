//! A runnable task that gets no CPU (issue 28): a SCHED_IDLE busy loop
//! pinned to CPU 1 behind a nice -20 busy loop there (weight 3 against
//! 88761: a slice every ~90 s) is named by `host.starved` within 2 s of
//! starting to starve, live in `top` and in `host --json`, with its CPU and
//! the loop that held it. The ground truth is the test's own reading of
//! /proc: state R, CPU 1 and a schedstat run time that stood still.

mod common;
use common::tmux::{have_tmux, Tmux};
use common::who::{serial, Hog};
use common::*;
use serde_json::Value;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Attempts before a run is failed (a host loaded by others can give the
/// idle loop a slice; such runs are rejected and named).
const TRIES: usize = 3;

/// The starving loop: SCHED_IDLE, pinned to CPU 1, under a name of its own.
struct Starved {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Starved {
    /// A busy loop on CPU 1 (exec'd under its name while it still gets a
    /// slice), then made SCHED_IDLE: it starves from [`Starved::starving`].
    fn start(name: &str) -> Starved {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join(name);
        std::fs::copy("/bin/sh", &exe).unwrap();
        let child = Command::new("taskset")
            .args(["-c", "1"])
            .arg(&exe)
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        Starved { child, _dir: dir }
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Starved {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (state, CPU, schedstat run ns) of a task, read by the test.
fn truth(pid: u32) -> (char, u32, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let sched = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    let run = sched.split_whitespace().next().unwrap().parse().unwrap();
    (f[0].chars().next().unwrap(), f[36].parse().unwrap(), run)
}

/// Waits until the loop runs under its name on CPU 1, then makes it
/// SCHED_IDLE (`chrt -i -p 0`): the moment it starts starving and its run
/// time then (None: it never got there).
fn starving_from(s: &Starved, name: &str) -> Option<(Instant, u64)> {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", s.pid())).unwrap_or_default();
        if comm.trim() == name && truth(s.pid()).1 == 1 {
            let ok = Command::new("chrt")
                .args(["-i", "-p", "0", &s.pid().to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "chrt -i -p 0 {}", s.pid());
            let from = Instant::now();
            // Its run time once the last slice it had ends.
            std::thread::sleep(Duration::from_millis(20));
            return Some((from, truth(s.pid()).2));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn waits(r: &Value) -> Vec<Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "host.starved")
        .flat_map(|f| f["evidence"]["waits"].as_array().unwrap().clone())
        .collect()
}

/// `host --json` over 4 s with the loop starving from its second second.
#[test]
fn host_names_a_starving_idle_loop_with_its_cpu_and_holder() {
    if !require(is_root(), "root (nice -20 for the holder)") {
        return;
    }
    let _serial = serial();
    for attempt in 1..=TRIES {
        let holder = Hog::start("holdr", -20, Some("1"));
        let holder_pid = holder.pid();
        // In a session of its own: in the test's autogroup, the holder's
        // nice -20 load would leave the group, stealscope with it, almost
        // no weight on the other CPU too (its 4 s capture took 22-30 s).
        let child = Command::new("setsid")
            .args(["-w", env!("CARGO_BIN_EXE_stealscope")])
            .args(["host", "--json", "--interval", "4s", "--exit-sample", "0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let s = Starved::start("starvl");
        let Some((from, run0)) = starving_from(&s, "starvl") else {
            panic!("the idle loop never showed up as runnable on CPU 1");
        };
        let out = child.wait_with_output().unwrap();
        let (state, cpu, run1) = truth(s.pid());
        let ended = from.elapsed();
        // Before the loop is killed: starving behind the holder, it would
        // take minutes to run once and die.
        drop(holder);
        assert_ok(&out);
        let r = json(&out);
        if state != 'R' || cpu != 1 || run1 != run0 {
            eprintln!(
                "attempt {attempt} rejected: the idle loop ran ({state}, CPU {cpu}, run {run0} -> {run1} ns)"
            );
            continue;
        }
        let w = waits(&r);
        let ours = w
            .iter()
            .find(|x| x["pid"].as_u64() == Some(s.pid().into()))
            .unwrap_or_else(|| panic!("starvl (pid {}) not named: {r}", s.pid()));
        assert_eq!(ours["cpu"], 1, "{ours}");
        assert_eq!(ours["process"], "starvl", "{ours}");
        assert!(ours["cgroup"].is_string(), "{ours}");
        assert_eq!(
            ours["held_by"][0]["pid"].as_u64(),
            Some(holder_pid.into()),
            "{ours}"
        );
        // Seen from at most 2 s after it started starving to the end of
        // the capture (which ended before the process did).
        let waited = ours["waited_s"].as_f64().unwrap();
        assert!(waited >= 1.0, "{ours}");
        assert!(
            waited <= ended.as_secs_f64() + 0.1,
            "waited {waited} s, starving for {ended:?}: {ours}"
        );
        eprintln!("attempt {attempt}: waited {waited:.2} s of {ended:.2?} starving: {ours}");
        return;
    }
    panic!("{TRIES} attempts rejected: the idle loop kept getting CPU");
}

/// `top` shows `host.starved` naming the loop within 2 s of its starving
/// start, before any rule interval ends (60 s).
#[test]
fn top_names_a_starving_idle_loop_within_two_seconds() {
    if !require(is_root() && have_tmux(), "root and tmux") {
        return;
    }
    let _serial = serial();
    let bin = env!("CARGO_BIN_EXE_stealscope");
    for attempt in 1..=TRIES {
        let holder = Hog::start("holdr", -20, Some("1"));
        let t = Tmux::start(160, 45);
        t.type_line(&format!("{bin} top --findings-interval 60s"));
        t.wait_for("top", Duration::from_secs(20), |s| s.contains("findings"));
        // The scanner's first full scans, before the loop starts.
        std::thread::sleep(Duration::from_secs(1));
        let s = Starved::start("starvt");
        let Some((from, run0)) = starving_from(&s, "starvt") else {
            panic!("the idle loop never showed up as runnable on CPU 1");
        };
        let pid = format!("(pid {}", s.pid());
        let screen = t.wait_for("host.starved", Duration::from_secs(10), |sc| {
            sc.lines()
                .any(|l| l.contains("host.starved") && l.contains(&pid))
        });
        let took = from.elapsed();
        let (state, cpu, run1) = truth(s.pid());
        t.keys(&["q"]);
        drop(holder);
        if state != 'R' || cpu != 1 || run1 != run0 {
            eprintln!("attempt {attempt} rejected: the idle loop ran ({run0} -> {run1} ns)");
            continue;
        }
        let line = screen
            .lines()
            .find(|l| l.contains("host.starved"))
            .unwrap()
            .to_string();
        assert!(line.contains("CPU 1"), "{line}");
        assert!(line.contains("holdr"), "{line}");
        eprintln!("attempt {attempt}: named {took:.2?} after it started starving: {line}");
        // Screen polls are 100 ms apart and a capture-pane takes a few ms.
        assert!(took <= Duration::from_millis(2200), "{took:?}: {line}");
        return;
    }
    panic!("{TRIES} attempts rejected: the idle loop kept getting CPU");
}
