//! A written recording read back as a snapshot and a timeline, complete and
//! cut off before its second checkpoint.

use super::load::open;
use crate::MachineModel;
use std::collections::BTreeMap;
use stealscope_readers::interrupts;
use stealscope_readers::recording::*;
use stealscope_readers::stat;

const START: u64 = 5_000_000_000;
const MS: u64 = 1_000_000;

fn header() -> Header {
    Header {
        hostname: Some("rec-host".into()),
        kernel: Some("6.1.0".into()),
        clk_tck: Some(100),
        probes: vec!["wakeup".into()],
        ..Header::new(100.0, 1_700_000_000.0, START)
    }
}

/// /proc/stat after `i` samples: cpu0 busy (user), cpu1 half stolen.
fn stat_text(i: u64) -> String {
    format!(
        "cpu  {} 0 0 {} 0 0 0 {} 0 0\ncpu0 {} 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 {} 0 0 0 {} 0 0\nintr 7 0\nctxt 9\n",
        i + (i / 2),
        i - i / 2,
        i / 2,
        i,
        i - i / 2,
        i / 2
    )
}

fn files(i: u64, uptime: &str) -> BTreeMap<String, Vec<u8>> {
    let mut f = BTreeMap::new();
    f.insert("/proc/stat".to_string(), stat_text(i).into_bytes());
    f.insert("/proc/uptime".to_string(), uptime.as_bytes().to_vec());
    f
}

fn irq(loc: u64) -> interrupts::Interrupts {
    let t = format!(
        "  CPU0 CPU1\nLOC: {loc} {} Local timer interrupts\n",
        loc / 2
    );
    interrupts::parse(&t, "i").unwrap()
}

/// 201 samples over 2 s; interrupts and vCPU times at 0, 1 and 2 s.
fn write(path: &std::path::Path, complete: bool) {
    let f = std::fs::File::create(path).unwrap();
    let mut w = RecordingWriter::create(f, "t", &header()).unwrap();
    w.checkpoint(START, &files(0, "100.00 50.00\n")).unwrap();
    let e = VcpuEntry {
        pid: 7,
        tid: 8,
        vcpu: 0,
        vm: "vm1".into(),
    };
    for i in 0..=200u64 {
        let t = START + 10 * MS * i;
        w.stat(t, &stat::parse(&stat_text(i), "s").unwrap())
            .unwrap();
        if i % 100 == 0 {
            let s = i / 100;
            w.irq(t, &irq(1000 * s)).unwrap();
            let times = ThreadTimes {
                run_ns: s * 600 * MS,
                wait_ns: s * 300 * MS,
            };
            w.vcpu(t, &[(e.clone(), times)]).unwrap();
            w.flush().unwrap();
        }
    }
    w.probe(ProbeRecord {
        probe: "wakeup".into(),
        cpu: Some(1),
        start_ns: START + 500 * MS,
        wall_ns: 1000 * MS,
        samples: 200,
        p50_ns: 30_000,
        p99_ns: 80_000,
        max_ns: 2_000_000,
        buckets: vec![(40_000, 190), (2_000_000, 10)],
    });
    w.note(START + 1500 * MS, "host scan: gone").unwrap();
    if complete {
        w.checkpoint(START + 2000 * MS, &files(200, "102.00 51.00\n"))
            .unwrap();
        let end = EndInfo {
            end_mono_ns: START + 2001 * MS,
            reason: "duration".into(),
            stat_samples: 201,
            kvm_clock: None,
        };
        w.finish(&end).unwrap();
    } else {
        w.flush().unwrap();
    }
}

#[test]
fn a_complete_recording_is_a_snapshot_and_a_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.ssr");
    write(&p, true);
    let r = open(&p).unwrap();
    assert!(r.complete);
    assert_eq!(r.checkpoints, 2);
    let s = &r.snapshot;
    assert_eq!(s.samples.len(), 201);
    assert_eq!(
        s.samples[0].stat,
        stat::render_cpu_lines(&stat::parse(&stat_text(0), "s").unwrap())
    );
    assert_eq!(s.meta.interval_s, 2.0);
    assert_eq!(s.meta.hostname.as_deref(), Some("rec-host"));
    let m = MachineModel::build(s).unwrap();
    assert_eq!(m.windows.len(), 200);
    assert!((m.wall_s - 2.0).abs() < 1e-9);
    // cpu1 was stolen half of the ticks, from t0 to t1 and window by window.
    let c1 = m.interval.cpus.iter().find(|c| c.cpu == 1).unwrap();
    assert!((c1.secs.steal - 1.0).abs() < 1e-9, "{c1:?}");

    let t = &r.timeline;
    assert_eq!(t.irq.len(), 2);
    assert_eq!(t.irq[1].start_s, 1.0);
    let loc0 = &t.irq[0].cpus[0];
    assert_eq!((loc0.cpu, loc0.total_per_s), (0, 1000.0));
    assert_eq!(t.irq[0].cpus[1].total_per_s, 500.0);
    assert_eq!(t.vcpu.len(), 2);
    assert_eq!(t.vcpu[0].vm, "vm1");
    assert!((t.vcpu[0].run_s - 0.6).abs() < 1e-9 && (t.vcpu[0].wait_s - 0.3).abs() < 1e-9);
    assert_eq!(t.probes.len(), 1);
    assert_eq!(t.probes[0].start_s, 0.5);
    assert_eq!(t.probes[0].max_us, 2000.0);
    assert_eq!(
        t.notes,
        vec!["recorder at +1.5 s: host scan: gone".to_string()]
    );
    // Written before exact steal: polled, said so, no episodes.
    assert!(t.steal_episodes.is_empty());
    let Some(crate::timeline::StealRoute::ProcStat { stat_hz, reason }) = &t.steal else {
        panic!("{:?}", t.steal)
    };
    assert_eq!(*stat_hz, 100.0);
    assert!(reason.contains("without exact steal"), "{reason}");
}

/// The exact route: the header says so, and the episodes between the
/// checkpoints are on the time line with their victims, timed from its
/// origin; one after the last checkpoint is left out.
#[test]
fn exact_steal_episodes_are_on_the_time_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("e.ssr");
    let f = std::fs::File::create(&p).unwrap();
    let h = Header {
        steal: Some(StealSource::Exact {
            threshold_ns: 100_000,
            drain_ms: 250,
        }),
        ..Header::new(1.0, 1_700_000_000.0, START)
    };
    let mut w = RecordingWriter::create(f, "t", &h).unwrap();
    w.checkpoint(START, &files(0, "100.00 50.00\n")).unwrap();
    for i in 0..=2u64 {
        let t = START + 1000 * MS * i;
        w.stat(t, &stat::parse(&stat_text(i), "s").unwrap())
            .unwrap();
    }
    let ep = |t_ns, cpu, ns, victim| StealEpisodeRecord {
        t_ns,
        cpu,
        ns,
        victim,
    };
    let pg = StealVictimRecord {
        tid: 813,
        pid: 812,
        comm: "postgres".into(),
    };
    w.steal([
        ep(START + 500 * MS, 1, 18 * MS, Some(pg)),
        ep(START + 1500 * MS, 0, 150_000, None),
        ep(START + 2500 * MS, 0, 150_000, None),
    ]);
    w.checkpoint(START + 2000 * MS, &files(2, "102.00 51.00\n"))
        .unwrap();
    let r = open(&p).unwrap();
    let t = &r.timeline;
    assert_eq!(
        t.steal,
        Some(crate::timeline::StealRoute::Exact {
            threshold_ns: 100_000,
            stat_hz: 1.0
        })
    );
    assert_eq!(t.steal_episodes.len(), 2, "{:?}", t.steal_episodes);
    let (a, b) = (&t.steal_episodes[0], &t.steal_episodes[1]);
    assert_eq!((a.t_s, a.cpu, a.ns), (0.5, 1, 18 * MS));
    let v = a.victim.as_ref().unwrap();
    assert_eq!((v.pid, v.tid, v.comm.as_str()), (812, 813, "postgres"));
    assert_eq!((b.t_s, b.cpu, b.victim.is_none()), (1.5, 0, true));
}

#[test]
fn cut_off_before_the_second_checkpoint_ends_at_the_last_sample() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.ssr");
    write(&p, false);
    // kill -9 mid-frame: a few bytes of a next frame.
    let mut b = std::fs::read(&p).unwrap();
    b.extend_from_slice(&[40, 0, 0, 0, 3, 1, 2]);
    std::fs::write(&p, &b).unwrap();
    let r = open(&p).unwrap();
    assert!(!r.complete);
    let notes = r.timeline.notes.join("\n");
    assert!(
        notes.contains("recording cut off (incomplete stat frame"),
        "{notes}"
    );
    assert!(
        notes.contains("ends before its second checkpoint"),
        "{notes}"
    );
    let s = &r.snapshot;
    assert_eq!(s.samples.len(), 201, "t1 is the last sample itself");
    assert!(
        notes.contains("no end frame") || notes.contains("cut off"),
        "{notes}"
    );
    assert_eq!(s.meta.interval_s, 2.0);
    let t1_stat = String::from_utf8(s.t1.files["/proc/stat"].clone()).unwrap();
    assert_eq!(
        t1_stat,
        stat_text(200),
        "cpu rows of the last sample, the rest as at t0"
    );
    assert_eq!(s.t1.files["/proc/uptime"], b"102.00 50.00\n");
    // The vCPU's times at t1 are its last scan's (2 s: 1.2 s run, 0.6 s
    // waited), not t0's: its steal is what the file holds, never 0 %.
    assert_eq!(
        s.t1.files["/proc/7/task/8/schedstat"],
        b"1200000000 600000000 0\n"
    );
    let m = MachineModel::build(s).unwrap();
    assert!((m.wall_s - 2.0).abs() < 1e-9);
    let d = s.damage.as_ref().expect("a cut file says so");
    assert_eq!(d.bytes_lost, Some(7));
    assert_eq!(d.cut_at_s, Some(2.0));
    assert!(d.why.contains("incomplete stat frame"), "{d:?}");
    assert!(
        d.headline().contains("cut off at +2.0 s"),
        "{}",
        d.headline()
    );
    assert_eq!(m.damage.as_ref(), Some(d));
}

#[test]
fn a_complete_recording_has_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.ssr");
    write(&p, true);
    assert!(open(&p).unwrap().snapshot.damage.is_none());
}

#[test]
fn no_checkpoint_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.ssr");
    let f = std::fs::File::create(&p).unwrap();
    let w = RecordingWriter::create(f, "t", &header()).unwrap();
    drop(w);
    let e = open(&p).unwrap_err().to_string();
    assert!(
        e.starts_with(&p.display().to_string()) && e.contains("no complete checkpoint"),
        "{e}"
    );
}
