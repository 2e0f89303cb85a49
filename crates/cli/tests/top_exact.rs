//! `stealscope top`'s exact steal panel (issue 30) in tmux at 80x24: as
//! root in a guest, the BPF route's busy/idle split over the last 10 s
//! against /proc/stat's steal read here over the same span, and the
//! longest episodes each on one line with its victim; as nobody, the
//! panel says the steal shown is /proc/stat's and why.

mod common;
use common::tmux::{have_tmux, Tmux};
use common::*;
use std::time::{Duration, Instant};

const START: Duration = Duration::from_secs(40);

/// Sum of every CPU's /proc/stat steal, seconds, and the CPU count.
fn stat_steal() -> (f64, usize) {
    let text = std::fs::read_to_string("/proc/stat").unwrap();
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let rows: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .nth(8)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
                / tck
        })
        .collect();
    (rows.iter().sum(), rows.len())
}

/// "busy 0.20%, idle 0.05%" of the panel's heading: (busy, idle) %.
fn split(heading: &str) -> Option<(f64, f64)> {
    let pct = |key: &str| -> Option<f64> {
        let rest = &heading[heading.find(key)? + key.len()..];
        rest[..rest.find('%')?].parse().ok()
    };
    Some((pct("busy ")?, pct("idle ")?))
}

/// An episode line: "   18.20 ms  cpu0     8 s ago  busy: postgres[812]".
fn is_episode(line: &str) -> bool {
    let mut w = line.split_whitespace();
    let ms = w.next().and_then(|v| v.parse::<f64>().ok());
    let rest: Vec<&str> = w.collect();
    ms.is_some_and(|ms| ms >= 0.1)
        && rest.first() == Some(&"ms")
        && rest.get(1).is_some_and(|c| c.starts_with("cpu"))
        && rest.get(3..5) == Some(&["s", "ago"])
        && rest
            .get(5)
            .is_some_and(|v| *v == "idle" || (*v == "busy:" && line.contains('[')))
}

#[test]
fn exact_steal_panel_at_80_columns_follows_proc_stat() {
    if !require(have_tmux(), "tmux (apt-get install tmux)")
        || !require(is_root(), "root (the guest steal collector loads BPF)")
    {
        return;
    }
    let t = Tmux::start(80, 24);
    // /proc/stat's steal every 250 ms while top runs: (when, seconds).
    let mut reads: Vec<(Instant, f64)> = Vec::new();
    t.type_line(&format!(
        "{} top; echo TOP''-EXIT=$?",
        env!("CARGO_BIN_EXE_stealscope")
    ));
    let end = Instant::now() + START;
    let screen = loop {
        reads.push((Instant::now(), stat_steal().0));
        let sc = t.screen();
        if sc.contains("exact steal n/a") {
            let why = sc.lines().find(|l| l.contains("why:")).unwrap_or("");
            // Fails in CI; elsewhere says why it skips.
            require(false, &format!("the exact steal collector: {why}"));
            t.keys(&["q"]);
            return;
        }
        if sc.contains("exact steal (BPF), last 10 s") {
            break sc;
        }
        assert!(Instant::now() < end, "no exact steal line:\n{sc}");
        std::thread::sleep(Duration::from_millis(250));
    };
    let (now, cpus) = stat_steal();
    println!("--- top at 80x24 ---\n{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("exact steal (BPF)"))
        .unwrap();
    let heading = lines[at];
    assert!(heading.trim_end().ends_with("episodes"), "cut: {heading}");
    let (busy, idle) = split(heading).unwrap_or_else(|| panic!("{heading}"));
    // /proc/stat over the 10 s before this screen. The panel's span ends
    // at top's latest sample (100 ms) drawn at its last frame (up to
    // ~0.25 s before the capture), so the test's span is off by well
    // under a second at each end; each CPU's delta by under one 10 ms
    // unit (0.1 % of a CPU over 10 s); and what the host took in a second
    // here is far below 0.1 %: 0.1 + 0.1 points.
    let then = reads
        .iter()
        .rev()
        .find(|(t, _)| t.elapsed() >= Duration::from_secs(10))
        .map(|r| r.1)
        .unwrap();
    let stat_pct = 100.0 * (now - then) / (10.0 * cpus as f64);
    println!("exact busy {busy} % + idle {idle} %, /proc/stat {stat_pct:.3} %");
    assert!(
        (busy + idle - stat_pct).abs() <= 0.2,
        "exact {busy} + {idle} %, /proc/stat {stat_pct} %:\n{screen}"
    );
    // Under it: the longest episodes, or that there was none.
    let body = lines[at + 1];
    assert!(
        is_episode(body) || body.contains("no episode of 0.1 ms or more"),
        "{body}"
    );
    for l in lines[at + 1..].iter().take_while(|l| is_episode(l)) {
        assert!(!l.contains('…') || l.chars().count() == 80, "{l}");
    }
    t.keys(&["q"]);
    t.wait_for("top to exit", Duration::from_secs(10), |s| {
        s.contains("TOP-EXIT=0")
    });

    // Unprivileged: the panel says why, the rest of top runs.
    let (_dir, bin) = world_runnable_binary();
    t.type_line("clear");
    t.type_line(&format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups {} top; echo NOBODY''-EXIT=$?",
        bin.display()
    ));
    let sc = t.wait_for("exact steal n/a as nobody", START, |sc| {
        sc.contains("why:") || sc.contains("NOBODY-EXIT=")
    });
    println!("--- top unprivileged at 80x24 ---\n{sc}");
    assert!(
        sc.contains("exact steal n/a: the steal above is /proc/stat's (10 ms units)"),
        "{sc}"
    );
    assert!(sc.contains("steal per "), "{sc}");
    // The reason whole, wrapped: the collector's hint at its end included.
    assert!(sc.contains("CAP_PERFMON"), "{sc}");
    t.keys(&["q"]);
    t.wait_for("top to exit", Duration::from_secs(10), |s| {
        s.contains("NOBODY-EXIT=0")
    });
}
