//! The guest steal collector's pure parts: the rule (episode folding), the
//! ring record, interval differencing, the loader's one-line reasons.

use super::{cpu_steal, one_line, steal_fields_missing, task_steal, RawCpu, RawTask, RawTaskKey};
use crate::guest_steal_fold::StealFold;
use crate::guest_steal_ring::{decode, EpisodeLog, RECORD_LEN};
use stealscope_who::guest_steal::{
    CpuSteal, GuestStealSample, StealEpisode, StealTaskId, StealVictim, TaskSteal,
};
use stealscope_who::hist::bucket;

fn task(tid: u32, comm: &str) -> StealVictim {
    StealVictim::Task(StealTaskId {
        tid,
        tgid: tid,
        start_ns: u64::from(tid) * 1000,
        comm: comm.into(),
    })
}

/// A `struct steal_event` as the program writes it.
fn record(mono: u64, ns: u64, tstart: u64, cpu: u32, tid: u32, tgid: u32, comm: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for w in [mono, ns, tstart] {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    for w in [cpu, tid, tgid, 0] {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    let mut c = [0u8; 16];
    c[..comm.len()].copy_from_slice(comm.as_bytes());
    b.extend_from_slice(&c);
    b
}

#[test]
fn the_first_reading_only_sets_the_start_and_advances_go_to_what_was_current() {
    let mut f = StealFold::new(1, 100_000);
    assert_eq!(f.observe(5_000_000, &task(7, "pg")), None, "start only");
    assert_eq!(f.cpu().total_ns(), 0);
    assert_eq!(f.observe(5_000_000, &task(7, "pg")), None, "no advance");
    assert_eq!(
        f.observe(5_050_000, &task(7, "pg")),
        None,
        "under threshold"
    );
    assert_eq!(f.observe(17_050_000, &StealVictim::Idle), Some(12_000_000));
    assert_eq!(f.observe(17_000_000, &task(8, "x")), None, "a step back");
    assert_eq!(f.observe(17_250_000, &task(7, "postgres")), Some(200_000));
    let c = f.cpu();
    assert_eq!((c.busy_ns, c.idle_ns), (250_000, 12_000_000));
    assert_eq!((c.busy_episodes, c.idle_episodes), (2, 1));
    assert_eq!(c.episodes.count, 3);
    assert_eq!(c.episodes.max_ns, 12_000_000);
    assert_eq!((c.episodes.over_1ms, c.episodes.over_10ms), (1, 1));
    assert_eq!(c.steal_clock_ns, 17_250_000);
    assert_eq!(c.hook_runs, 6);
    // The sum of the charges is the clock's advance since the start.
    assert_eq!(c.total_ns(), 17_250_000 - 5_000_000);
    let t = f.tasks();
    assert_eq!(t.len(), 1, "task 8 was charged nothing: {t:?}");
    assert_eq!((t[0].busy_ns, t[0].episodes), (250_000, 2));
    assert_eq!(t[0].task.comm, "postgres", "renamed at its last charge");
}

#[test]
fn a_record_decodes_to_its_episode_and_idle_has_no_task() {
    let r = record(123, 18_200_000, 999, 1, 812, 800, "postgres");
    assert_eq!(r.len(), RECORD_LEN);
    let e = decode(&r, 4).unwrap();
    assert_eq!(
        e,
        StealEpisode {
            seq: 4,
            monotonic_ns: 123,
            ns: 18_200_000,
            cpu: 1,
            victim: StealVictim::Task(StealTaskId {
                tid: 812,
                tgid: 800,
                start_ns: 999,
                comm: "postgres".into()
            }),
        }
    );
    let full = record(1, 2, 3, 0, 5, 5, "sixteen-chars-xx");
    match decode(&full, 0).unwrap().victim {
        StealVictim::Task(t) => assert_eq!(t.comm, "sixteen-chars-xx"),
        v => panic!("{v:?}"),
    }
    let idle = decode(&record(1, 2, 3, 0, 0, 0, "swapper/0"), 0).unwrap();
    assert_eq!(idle.victim, StealVictim::Idle);
    assert_eq!(decode(&r[..RECORD_LEN - 1], 0), None);
}

#[test]
fn the_log_keeps_the_most_recent_and_counts_every_record() {
    let mut log = EpisodeLog::new(2);
    for i in 0..5u64 {
        log.push(&record(i, 1000 + i, 0, 0, 0, 0, ""));
    }
    log.push(&[0u8; 10]);
    assert_eq!(log.seen(), 5);
    assert_eq!(log.malformed, 1);
    let seqs: Vec<u64> = log.recent().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![3, 4]);
}

fn sample(
    busy: u64,
    idle: u64,
    tasks: Vec<TaskSteal>,
    eps: &[(u64, u64)],
    seen: u64,
) -> GuestStealSample {
    let mut c = CpuSteal {
        cpu: 0,
        busy_ns: busy,
        idle_ns: idle,
        ..CpuSteal::default()
    };
    for &(_, ns) in eps {
        c.episodes.record(ns);
    }
    GuestStealSample {
        monotonic_ns: 0,
        threshold_ns: 100_000,
        cpus: vec![c],
        tasks,
        episodes: eps
            .iter()
            .map(|&(seq, ns)| StealEpisode {
                seq,
                monotonic_ns: seq,
                cpu: 0,
                ns,
                victim: StealVictim::Idle,
            })
            .collect(),
        episodes_seen: seen,
    }
}

fn ts(tid: u32, ns: u64, episodes: u64) -> TaskSteal {
    let StealVictim::Task(task) = task(tid, "t") else {
        unreachable!()
    };
    TaskSteal {
        task,
        busy_ns: ns,
        episodes,
    }
}

#[test]
fn an_interval_holds_what_grew_and_the_episodes_drained_in_it() {
    let a = sample(
        100,
        50,
        vec![ts(1, 100, 2)],
        &[(0, 200_000), (1, 300_000)],
        2,
    );
    let b = sample(
        400,
        80,
        vec![ts(2, 250, 1), ts(1, 150, 3)],
        &[(0, 200_000), (1, 300_000), (2, 5_000_000), (3, 400_000)],
        5,
    );
    let d = b.since(&a);
    assert_eq!((d.busy_ns(), d.idle_ns()), (300, 30));
    let got: Vec<(u32, u64, u64)> = d
        .tasks
        .iter()
        .map(|t| (t.task.tid, t.busy_ns, t.episodes))
        .collect();
    assert_eq!(got, vec![(2, 250, 1), (1, 50, 1)], "most first");
    let seqs: Vec<u64> = d.episodes.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![2, 3]);
    assert_eq!(d.cpus[0].episodes.count, 2);
    assert_eq!(d.cpus[0].episodes.max_ns, 5_000_000);
    // Seq 4 was drained but fell off the list.
    assert_eq!(b.episodes_unlisted(&a), 1);
    let big: Vec<u64> = d.largest_episodes(1).iter().map(|e| e.ns).collect();
    assert_eq!(big, vec![5_000_000]);
    // A task that did not grow is not in the interval.
    let same = b.since(&b);
    assert!(same.tasks.is_empty() && same.episodes.is_empty());
}

#[test]
fn reasons_are_one_line() {
    let log = "the BPF_PROG_LOAD syscall failed. Verifier output: 0: R1=ctx()\n\n1: (79) r2 = *(u64 *)(r1 +8)\ninvalid access to map value\n";
    let l = one_line(log);
    assert!(!l.contains('\n'), "{l}");
    assert!(l.starts_with("the BPF_PROG_LOAD") && l.ends_with("invalid access to map value"));
    assert_eq!(one_line("plain"), "plain");
    // Refused before the verifier ran (fentry on this project's test VM).
    assert_eq!(
        one_line("the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier output:\n"),
        "the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)."
    );
    let with_stats = "load failed: 0: R1=ctx()\nR2 invalid mem access 'scalar'\nprocessed 10 insns (limit 1000000) max_states_per_insn 0\n";
    assert_eq!(
        one_line(with_stats),
        "load failed: 0: R1=ctx() ... R2 invalid mem access 'scalar'"
    );
    let no = steal_fields_missing(b"\0clock\0prev_steal\0").unwrap();
    assert!(no.contains("CONFIG_PARAVIRT") && !no.contains('\n'), "{no}");
    assert_eq!(steal_fields_missing(b"\0prev_steal_time\0"), None);
    assert_eq!(steal_fields_missing(b"x\0prev_steal_time_rq\0"), None);
}

#[test]
fn kernel_counters_become_the_model_the_fold_would_give() {
    // The same readings through the Rust rule and through the layout the
    // program fills: one CPU, episodes of 50 us (busy), 2 ms (idle) and
    // 12 ms (busy).
    let mut f = StealFold::new(3, 100_000);
    f.observe(1_000, &task(9, "db"));
    f.observe(51_000, &task(9, "db"));
    f.observe(2_051_000, &StealVictim::Idle);
    f.observe(14_051_000, &task(9, "db"));
    // SAFETY: RawCpu is plain integers; all-zero is its start state.
    let mut raw: RawCpu = unsafe { std::mem::zeroed() };
    for ns in [50_000u64, 2_000_000, 12_000_000] {
        raw.buckets[bucket(ns)] += 1;
    }
    raw.primed = 1;
    raw.last = 14_051_000;
    raw.runs = 4;
    raw.busy_ns = 12_050_000;
    raw.idle_ns = 2_000_000;
    raw.busy_count = 2;
    raw.idle_count = 1;
    raw.max_ns = 12_000_000;
    raw.over_1ms = 2;
    raw.over_10ms = 1;
    let got = cpu_steal(3, &raw);
    assert_eq!(&got, f.cpu());
    assert_eq!(got.episodes.quantile(0.5), Some(bucket_upper(2_000_000)));
    let mut comm = [0u8; 16];
    comm[..2].copy_from_slice(b"db");
    let t = task_steal(
        &RawTaskKey {
            tid: 9,
            pad: 0,
            tstart: 9_000,
        },
        &RawTask {
            ns: 12_050_000,
            count: 2,
            tgid: 9,
            pad: 0,
            comm,
        },
    );
    assert_eq!(vec![t], f.tasks());
}

fn bucket_upper(ns: u64) -> u64 {
    stealscope_who::hist::upper(bucket(ns))
}
