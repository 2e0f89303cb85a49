//! `stealscope top` in a real terminal (tmux): every online CPU (from sysfs)
//! with its numbers, the keys, quitting on q, SIGTERM and a panic with the
//! terminal restored each time (alternate screen left, tty modes as before),
//! tiny and changing sizes, no terminal at all, exact shares and a counter
//! anomaly from a rewritten --root, and a real QEMU VM in the host table.

mod common;
use common::testenv::{self, testenv};
use common::tmux::{children_named, have_tmux, Tmux};
use common::*;
use std::time::Duration;

const START: Duration = Duration::from_secs(20);

/// Online CPUs as sysfs lists them ("0-3,5").
fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut out = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// The numbers of the CPU bar row of `cpu`: (busy, steal, idle) %, steal
/// None when the row says n/a.
fn bar_row(screen: &str, cpu: u32) -> Option<(f64, Option<f64>, f64)> {
    let line = screen
        .lines()
        .find(|l| l.starts_with(&format!("cpu{cpu} ")) && l.contains(" busy "))?;
    let after = |key: &str| -> Option<&str> {
        let rest = &line[line.find(&format!(" {key} "))? + key.len() + 2..];
        rest.split_whitespace().next()
    };
    let num = |s: &str| s.strip_suffix('%')?.parse::<f64>().ok();
    Some((
        num(after("busy")?)?,
        after("steal").and_then(num),
        num(after("idle")?)?,
    ))
}

/// Every online CPU has a bar row with numbers that make sense.
fn shows_every_cpu(screen: &str, cpus: &[u32]) -> bool {
    cpus.iter().all(|c| bar_row(screen, *c).is_some())
}

/// A shell in tmux, its tty settings saved to compare after top.
struct Session {
    tmux: Tmux,
    dir: tempfile::TempDir,
}

impl Session {
    fn start(width: u16, height: u16) -> Session {
        let s = Session {
            tmux: Tmux::start(width, height),
            dir: tempfile::tempdir().unwrap(),
        };
        s.tmux
            .type_line(&format!("stty -g > {}/before", s.dir.path().display()));
        s
    }

    /// Runs `stealscope top` with `env` before it; prints its exit code after.
    fn run_top(&self, env: &str) {
        self.tmux.type_line(&format!(
            // Quoted apart so that the typed line does not match the output.
            "{env} {} top; echo TOP''-EXIT=$?",
            env!("CARGO_BIN_EXE_stealscope")
        ));
    }

    /// Waits until top shows every online CPU; returns that screen.
    fn wait_for_cpus(&self) -> String {
        let cpus = online_cpus();
        self.tmux
            .wait_for("every online CPU", START, |sc| shows_every_cpu(sc, &cpus))
    }

    /// After top exited: its exit code, the normal screen back with none
    /// of top's rows on it, and the tty modes as they were before.
    fn assert_restored(&self, exit: i32) -> String {
        let screen = self.assert_exit_and_tty(exit);
        assert!(
            !screen.contains("CPU last 1 s") && !screen.contains("? help  q quit"),
            "top's screen left behind:\n{screen}"
        );
        screen
    }

    /// As [`Session::assert_restored`] but for a pane resized while top ran:
    /// tmux then moves rows of the alternate screen into the normal one
    /// (`less` shows the same), so only the exit, the alternate screen left
    /// and the tty modes are checked.
    fn assert_exit_and_tty(&self, exit: i32) -> String {
        let want = format!("TOP-EXIT={exit}");
        // The typed line reads TOP''-EXIT, so this matches the output only
        // (wherever tmux's reflow after a resize put it).
        let screen = self
            .tmux
            .wait_for(&want, Duration::from_secs(15), |s| s.contains("TOP-EXIT="));
        assert!(screen.contains(&want), "{screen}");
        assert!(!self.tmux.alternate_on(), "still on the alternate screen");
        let d = self.dir.path().display();
        self.tmux.type_line(&format!(
            "stty -g > {d}/after; cmp -s {d}/before {d}/after && echo TTY''-SAME || echo TTY''-CHANGED"
        ));
        let s = self
            .tmux
            .wait_for("the tty comparison", Duration::from_secs(10), |s| {
                s.contains("TTY-SAME") || s.contains("TTY-CHANGED")
            });
        assert!(s.contains("TTY-SAME"), "tty modes not restored:\n{s}");
        screen
    }

    fn top_pid(&self) -> u32 {
        let shell = self.tmux.shell_pid();
        let pids = children_named(shell, "stealscope");
        assert_eq!(pids.len(), 1, "top's pid under shell {shell}: {pids:?}");
        pids[0]
    }
}

fn need_tmux() -> bool {
    require(have_tmux(), "tmux (apt-get install tmux)")
}

#[test]
fn shows_every_cpu_answers_keys_and_quits_cleanly() {
    if !need_tmux() {
        return;
    }
    let cpus = online_cpus();
    let s = Session::start(100, (cpus.len() as u16 + 22).max(30));
    s.run_top("");
    s.wait_for_cpus();
    // A whole frame: tmux can be captured while top is still writing one
    // (CPU rows there, the panels below them not yet).
    let screen = s.tmux.wait_for("a whole frame", START, |sc| {
        shows_every_cpu(sc, &cpus) && sc.contains("steal per ") && sc.contains("findings")
    });
    assert!(s.tmux.alternate_on());
    let has_steal = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("cpu0 "))
        .is_some_and(|l| l.split_whitespace().count() > 8);
    for c in &cpus {
        let (busy, steal, idle) = bar_row(&screen, *c).unwrap();
        // Steal is shown exactly when the kernel has the column.
        assert_eq!(steal.is_some(), has_steal, "cpu{c}:\n{screen}");
        let steal = steal.unwrap_or(0.0);
        for v in [busy, steal, idle] {
            assert!((0.0..=100.0).contains(&v), "cpu{c} {v}:\n{screen}");
        }
        // Shares of the accounted time: they add up to 100 (each printed
        // to 0.1).
        let sum = busy + steal + idle;
        assert!(
            (sum - 100.0).abs() <= 0.2,
            "cpu{c} adds to {sum}:\n{screen}"
        );
    }
    assert!(screen.contains("steal per "), "{screen}");
    assert!(screen.contains("findings"), "{screen}");

    s.tmux.keys(&["?"]);
    s.tmux.wait_for("the help", Duration::from_secs(5), |sc| {
        sc.contains("show / hide this help") && sc.contains("pause / resume")
    });
    s.tmux.keys(&["?"]);
    s.tmux
        .wait_for("the help to close", Duration::from_secs(5), |sc| {
            !sc.contains("show / hide this help")
        });
    s.tmux.keys(&["p"]);
    s.tmux
        .wait_for("PAUSED", Duration::from_secs(5), |sc| sc.contains("PAUSED"));
    s.tmux.keys(&["p", "+"]);
    s.tmux
        .wait_for("20 Hz and no pause", Duration::from_secs(5), |sc| {
            sc.contains("20 Hz (50 ms)") && !sc.contains("PAUSED")
        });
    // The findings of the first rule run (5 s) arrive without blocking.
    s.tmux
        .wait_for("a rule run", START, |sc| sc.contains(" s ago"));
    s.tmux.keys(&["q"]);
    s.assert_restored(0);
}

#[test]
fn escape_and_ctrl_c_quit_too() {
    if !need_tmux() {
        return;
    }
    for key in ["Escape", "C-c"] {
        let s = Session::start(80, 30);
        s.run_top("");
        s.wait_for_cpus();
        s.tmux.keys(&[key]);
        s.assert_restored(0);
    }
}

#[test]
fn tiny_and_changing_sizes_do_not_crash() {
    if !need_tmux() {
        return;
    }
    let first_row = |sc: &str| sc.lines().any(|l| l.starts_with("cpu") && l.contains(" b"));
    // 30x8 from the start: the short form of the bars, then a clean exit.
    let s = Session::start(30, 8);
    s.run_top("");
    s.tmux.wait_for("the first CPU row", START, first_row);
    s.tmux.keys(&["q"]);
    s.assert_restored(0);
    // Shrunk to nothing and grown again while running.
    let s = Session::start(30, 8);
    s.run_top("");
    s.tmux.wait_for("the first CPU row", START, first_row);
    for (w, h) in [(12, 3), (1, 1), (40, 10), (20, 2)] {
        s.tmux.resize(w, h);
        std::thread::sleep(Duration::from_millis(400));
        assert!(s.tmux.alternate_on(), "top ended at {w}x{h}");
    }
    s.tmux.resize(100, 30);
    s.wait_for_cpus();
    s.tmux.keys(&["q"]);
    s.assert_exit_and_tty(0);
}

#[test]
fn sigterm_hangup_and_panic_end_top_and_restore_the_terminal() {
    if !need_tmux() {
        return;
    }
    let s = Session::start(100, 30);
    s.run_top("");
    s.wait_for_cpus();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(s.top_pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    s.assert_restored(0);

    // The terminal goes away (SIGHUP): top ends instead of spinning on a
    // dead tty.
    let s = Session::start(100, 30);
    s.run_top("");
    s.wait_for_cpus();
    let pid = s.top_pid();
    s.tmux.kill_server();
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
            st.rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        })
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(
            std::time::Instant::now() < until,
            "top (pid {pid}) still running after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A panic (failpoint after the first frame): Rust's exit code 101, the
    // message on the normal screen, the terminal as it was.
    let s = Session::start(100, 30);
    s.run_top("STEALSCOPE_FAILPOINT=top-panic");
    let screen = s.assert_restored(101);
    assert!(screen.contains("failpoint top-panic"), "{screen}");
}

#[test]
fn without_a_terminal_it_says_so_and_exits_2() {
    let out = run(&["top"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a terminal"), "{err}");
    let out = run(&["top", "--rate", "0"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_real_qemu_vm_is_in_the_host_table() {
    if !need_tmux() || !require(testenv::have_qemu(), "root and qemu-system-x86_64") {
        return;
    }
    let _vms = testenv::Vms;
    let name = format!("top{}", std::process::id());
    testenv("start-vm.sh", &[&name, "2", "--busy", "1"]);
    let vcpus = testenv::qmp_tids(&name).len();
    let s = Session::start(100, 40);
    s.run_top("");
    // A row "NAME wait% run% culprits" once two scans measured it, and
    // one "  vCPU N" row under it per vCPU.
    let row = |sc: &str| -> Option<(Vec<String>, usize)> {
        let mut lines = sc
            .lines()
            .skip_while(|l| !l.starts_with(&format!("{name} ")));
        let cols: Vec<String> = lines.next()?.split_whitespace().map(String::from).collect();
        let n = lines.take_while(|l| l.starts_with("  vCPU ")).count();
        (cols.len() >= 4 && cols[1].ends_with('%') && cols[2].ends_with('%')).then_some((cols, n))
    };
    let screen = s
        .tmux
        .wait_for("the VM measured in the table", START, |sc| {
            row(sc).is_some()
        });
    let (cols, n) = row(&screen).unwrap();
    assert_eq!(n, vcpus, "{screen}");
    let v: Vec<f64> = cols[1..3]
        .iter()
        .map(|c| c.trim_end_matches('%').parse().unwrap())
        .collect();
    // The busy vCPU's thread is always runnable (running or waiting), the
    // idle one mostly asleep: per vCPU, run + wait is at least half of wall
    // time, and never more than all of it (a few % of scan timing aside).
    let occupied = v[0] + v[1];
    assert!(
        (45.0..=105.0).contains(&occupied),
        "wait {} + run {} per vCPU:\n{screen}",
        v[0],
        v[1]
    );
    assert!(screen.contains("by wait"), "{screen}");
    s.tmux.keys(&["s"]);
    s.tmux
        .wait_for("sorted by run", Duration::from_secs(5), |sc| {
            sc.contains("by run")
        });
    s.tmux.keys(&["q"]);
    s.assert_restored(0);
}

/// /proc/stat of a --root the test rewrites in place (same length, so a
/// concurrent read never sees half a number), one step per 100 ms: cpu0
/// gains 2 user, 2 steal and 1 idle ticks, cpu1 1 user and 3 idle (never
/// more than the kernel could count in a window, so nothing is clamped).
/// Whenever top samples, the shares it shows are those ratios, exactly.
struct FakeStat {
    path: std::path::PathBuf,
    step: u64,
}

impl FakeStat {
    fn write(&mut self, steal_offset: u64) {
        use std::io::Write;
        let k = self.step + 1000;
        let row = |user: u64, idle: u64, steal: u64| {
            format!("{user:010} 0 0 {idle:010} 0 0 0 {steal:010} 0 0")
        };
        let text = format!(
            "cpu  {}\ncpu0 {}\ncpu1 {}\nintr 0\nctxt 0\nbtime 0\n",
            row(3 * k, 4 * k, 2 * k + steal_offset),
            row(2 * k, k, 2 * k + steal_offset),
            row(k, 3 * k, 0),
        );
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        self.step += 1;
    }
}

#[test]
fn numbers_follow_the_counters_of_a_rewritten_root() {
    use std::sync::atomic::{AtomicBool, Ordering};
    if !need_tmux() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("proc")).unwrap();
    let path = root.path().join("proc/stat");
    let mut stat = FakeStat { path, step: 0 };
    stat.write(1_000_000);
    let (stop, jump) = (
        std::sync::Arc::new(AtomicBool::new(false)),
        std::sync::Arc::new(AtomicBool::new(false)),
    );
    let writer = {
        let (stop, jump) = (stop.clone(), jump.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // Steal jumps back when told (as after a migration).
                let offset = if jump.load(Ordering::Relaxed) {
                    0
                } else {
                    1_000_000
                };
                stat.write(offset);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let s = Session::start(100, 30);
    s.tmux.type_line(&format!(
        "{} top --root {}; echo TOP''-EXIT=$?",
        env!("CARGO_BIN_EXE_stealscope"),
        root.path().display()
    ));
    let want = [(0, (40.0, Some(40.0), 20.0)), (1, (25.0, Some(0.0), 75.0))];
    let exact = |sc: &str| want.iter().all(|(c, v)| bar_row(sc, *c) == Some(*v));
    let sc = s.tmux.wait_for("the ratios of the counters", START, exact);
    assert!(sc.starts_with("stealscope top  ?  10 Hz"), "{sc}");
    assert!(!sc.contains("counter anomalies"), "{sc}");
    jump.store(true, Ordering::Relaxed);
    s.tmux.wait_for("the backwards steal counter", START, |sc| {
        sc.contains("1 counter anomaly clamped")
    });
    // Past the jump the shares are the ratios again.
    s.tmux.wait_for("the ratios after the jump", START, exact);
    s.tmux.keys(&["q"]);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    s.assert_restored(0);
}
