//! The doctor report's own figures (the rules have their tests beside
//! them).

use crate::report::{build, ReportInput};
use crate::testing::{ticks, TestMachine};

/// A CPU whose ticks over a 5 s interval (by /proc/uptime) add up to
/// 5.08 s, as a loaded host reads /proc/stat and /proc/uptime at different
/// moments: its busy, idle and steal still add up to 100 %.
#[test]
fn cpu_shares_add_up_to_100_whatever_the_wall_clock_says() {
    let m = TestMachine::guest().cpus(&[ticks(300, 158, 50), ticks(125, 375, 0)]);
    let model = m.model();
    let over: f64 = {
        let c = &model.interval.cpus[0];
        c.busy_pct() + c.idle_pct() + c.steal_pct()
    };
    assert!(over > 101.0, "the input is past wall time: {over}");
    let r = build(ReportInput {
        model: &model,
        interval_s: 5.0,
        hostname: None,
        kernel: None,
    });
    for c in &r.summary.cpus {
        let sum = c.busy_pct.unwrap() + c.idle_pct.unwrap() + c.steal_pct.unwrap();
        assert!((sum - 100.0).abs() <= 0.02, "cpu{}: {sum}", c.cpu);
    }
    // 50 of 508 ticks were steal.
    let steal = r.summary.cpus[0].steal_pct.unwrap();
    assert!((steal - 100.0 * 50.0 / 508.0).abs() < 0.01, "{steal}");
}

/// A host process is named by its process's comm with its threads folded
/// in (rustc's "coordinator" and "lto cgu.05" are rustc), and the threads
/// kept as its list; stealscope's own threads are no culprit and no host
/// work, but its cost, said once.
#[test]
fn culprits_are_processes_and_stealscope_is_its_own_cost() {
    use crate::testing::host::{busy, Ran};
    let on_vcpu: &[Ran] = &[
        (701, 700, "coordinator", 0.6),
        (702, 700, "lto cgu.05", 0.3),
        (951, 950, "sampler", 0.1),
    ];
    let m = TestMachine::guest()
        .cpus(&[ticks(500, 0, 0); 2])
        .vm(100, "web", &[busy(4.0, 1.0)])
        .process(700, "rustc", busy(0.1, 0.0))
        .thread(700, 701, "coordinator", busy(2.0, 0.5))
        .thread(700, 702, "lto cgu.05", busy(1.5, 0.5))
        .process(950, "stealscope", busy(0.05, 0.0))
        .thread(950, 951, "sampler", busy(0.2, 0.0))
        .file("/stealscope/own-pid.json", "950")
        .sched_reading(&[(101, on_vcpu)]);
    let r = build(ReportInput {
        model: &m.model(),
        interval_s: 5.0,
        hostname: None,
        kernel: None,
    });
    let who = &r.host.as_ref().unwrap().who;
    let names: Vec<&str> = who
        .culprits
        .iter()
        .map(|c| c.charge.culprit.name.as_str())
        .collect();
    assert_eq!(names, ["rustc"], "{:?}", who.culprits);
    let rustc = &who.culprits[0];
    assert_eq!(rustc.charge.culprit.pid, Some(700));
    assert!((rustc.charge.seconds - 0.9).abs() < 1e-9, "{rustc:?}");
    let threads: Vec<(&str, f64)> = rustc
        .threads
        .iter()
        .map(|t| (t.comm.as_str(), t.seconds))
        .collect();
    assert_eq!(threads, [("coordinator", 0.6), ("lto cgu.05", 0.3)]);
    // Host work: rustc's three threads (3.6 s of 5 s), not stealscope's.
    let hw = &who.host_work;
    assert!(
        hw.top.iter().all(|w| w.culprit.name != "stealscope"),
        "{hw:?}"
    );
    assert!((hw.run_cpus - 3.6 / 5.0).abs() < 1e-9, "{hw:?}");
    let own = hw.own.as_ref().expect("its own cost");
    assert_eq!(own.pid, 950);
    assert!((own.run_cpus - 0.25 / 5.0).abs() < 1e-9, "{own:?}");
    assert!((own.vcpu_wait_s.unwrap() - 0.1).abs() < 1e-9, "{own:?}");
    // No finding blames it.
    let text = format!("{:?}", r.findings);
    assert!(!text.contains("stealscope (pid"), "{text}");
}
