use super::*;
use stealscope_who::{StealEpisode, StealTaskId, TaskSteal};

fn cpu(n: u32, busy: u64, idle: u64, episodes: &[u64]) -> CpuSteal {
    CpuSteal {
        hook_runs: 1,
        ..CpuSteal::from_episodes(n, busy, idle, episodes)
    }
}

fn task(tid: u32, tgid: u32, comm: &str, busy_ns: u64) -> TaskSteal {
    TaskSteal {
        task: StealTaskId {
            tid,
            tgid,
            start_ns: u64::from(tid) * 1000,
            comm: comm.into(),
        },
        busy_ns,
        episodes: 1,
    }
}

fn full(t_ns: u64, tasks: Vec<TaskSteal>, episodes: Vec<StealEpisode>) -> ExactReading {
    let seen = episodes.last().map_or(0, |e| e.seq + 1);
    ExactReading::Full {
        sample: GuestStealSample {
            monotonic_ns: t_ns,
            threshold_ns: 100_000,
            cpus: vec![cpu(0, 1, 1, &[2])],
            tasks,
            episodes,
            episodes_seen: seen,
        },
        processes: [(10, "postgres".to_string())].into(),
    }
}

fn running() -> RunningExactSteal {
    let mut r = RunningExactSteal::default();
    r.apply(ExactReading::Running);
    r
}

#[test]
fn counters_never_go_back_and_idle_cpus_are_left_out() {
    let mut r = running();
    let never_ran = CpuSteal {
        cpu: 7,
        ..CpuSteal::default()
    };
    r.apply(ExactReading::Cpus {
        t_ns: 1,
        cpus: vec![cpu(0, 5, 3, &[4, 4]), never_ran],
    });
    // A reading that went backwards (a bad map read) is not exported.
    r.apply(ExactReading::Cpus {
        t_ns: 2,
        cpus: vec![cpu(0, 4, 9, &[4, 4, 5])],
    });
    let c: Vec<_> = r.cpus().map(|c| (c.cpu, c.busy_ns, c.idle_ns)).collect();
    assert_eq!(c, [(0, 5, 3)]);
    r.apply(ExactReading::Cpus {
        t_ns: 3,
        cpus: vec![cpu(0, 6, 9, &[4, 4, 5])],
    });
    let c: Vec<_> = r.cpus().map(|c| (c.busy_ns, c.episodes.count)).collect();
    assert_eq!(c, [(6, 3)]);
}

#[test]
fn nothing_is_counted_before_the_route_is_known_nor_after_it_fell_back() {
    let mut r = RunningExactSteal::default();
    r.apply(ExactReading::Cpus {
        t_ns: 1,
        cpus: vec![cpu(0, 5, 3, &[8])],
    });
    assert_eq!(r.cpus().count(), 0);
    assert!(r.victims().is_empty());
    r.apply(ExactReading::Running);
    r.apply(full(2, vec![task(11, 10, "worker", 50)], vec![]));
    assert_eq!(r.cpus().count(), 1);
    r.apply(ExactReading::Unavailable("stopped: EIO".into()));
    assert_eq!(r.route.label(), "proc_stat");
    assert_eq!(r.route.reason(), "stopped: EIO");
    assert_eq!(r.cpus().count(), 0);
    assert!(r.victims().is_empty() && r.recent().is_none());
}

#[test]
fn victims_are_processes_bounded_with_the_rest_as_other() {
    let mut r = running();
    let mut last: BTreeMap<Option<String>, f64> = BTreeMap::new();
    // 30 processes, one new each round, growing unevenly; a task the LRU
    // map dropped comes back from 0.
    let mut tasks: Vec<TaskSteal> = Vec::new();
    for round in 0..60u32 {
        let pid = 100 + round % 30;
        match tasks.iter_mut().find(|t| t.task.tgid == pid) {
            Some(t) => t.busy_ns += 1_000 * u64::from(round),
            None => tasks.push(task(pid, pid, &format!("p{pid}"), 1_000)),
        }
        if round == 40 {
            tasks[0].busy_ns = 10;
        }
        r.apply(full(u64::from(round), tasks.clone(), vec![]));
        let v = r.victims();
        assert!(v.len() <= TOP_VICTIMS + 1, "{v:?}");
        assert_eq!(v.last().unwrap().0, None, "other last");
        for (name, s) in v {
            let prev = last.insert(name.map(str::to_string), s).unwrap_or(0.0);
            assert!(s >= prev, "{name:?} went from {prev} to {s}");
        }
    }
    let sum: f64 = r.victims().iter().map(|v| v.1).sum();
    assert!(sum > 0.0);
}

#[test]
fn a_thread_is_charged_to_its_process() {
    let mut r = running();
    r.apply(full(
        1,
        vec![
            task(11, 10, "worker 1", 2_000),
            task(12, 10, "worker 2", 3_000),
        ],
        vec![],
    ));
    assert_eq!(r.victims(), [(Some("postgres"), 5e-6), (None, 0.0)]);
}

#[test]
fn episodes_are_taken_once_and_the_largest_listed_with_victims() {
    let mut r = running();
    let ep = |seq, t, ns, victim| StealEpisode {
        seq,
        monotonic_ns: t,
        cpu: 1,
        ns,
        victim,
    };
    let hit = StealVictim::Task(StealTaskId {
        tid: 11,
        tgid: 10,
        start_ns: 1,
        comm: "worker".into(),
    });
    let a = ep(0, 1_000, 300_000, StealVictim::Idle);
    let b = ep(1, 2_000, 4_000_000, hit);
    r.apply(full(2_000, vec![], vec![a.clone(), b.clone()]));
    // The collector lists recent episodes again with each reading.
    r.apply(full(3_000, vec![], vec![a, b]));
    let l = r.largest(5);
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].ns, 4_000_000);
    let v = l[0].victim.as_ref().unwrap();
    assert_eq!(
        (v.pid, v.comm.as_str(), v.thread.as_deref()),
        (10, "postgres", Some("worker"))
    );
    assert!(l[1].victim.is_none(), "idle steal");
    // A minute later they are gone.
    r.apply(full(EPISODES_KEPT_NS + 10_000, vec![], vec![]));
    assert!(r.largest(5).is_empty());
}

#[test]
fn recent_steal_covers_about_the_last_ten_seconds() {
    let mut r = running();
    for s in 0..=30u64 {
        r.apply(ExactReading::Cpus {
            t_ns: s * 1_000_000_000,
            cpus: vec![cpu(0, s * 1_000_000, s * 2_000_000, &[]), cpu(1, 0, 0, &[])],
        });
    }
    let rs = r.recent().unwrap();
    assert!((10.0..=11.0).contains(&rs.span_s), "{rs:?}");
    let busy = rs.pct(rs.busy_ns).unwrap();
    // 1 ms a second on one of two CPUs: 0.05 %.
    assert!((busy - 0.05).abs() < 1e-9, "{busy}");
    assert!((rs.pct(rs.idle_ns).unwrap() - 0.1).abs() < 1e-9);
}
