//! Round trip of every frame kind, and the decoder against cut, flipped and
//! random bytes: a readable prefix with a note, or a one-line error; never
//! a panic.

use super::*;
use crate::interrupts;
use crate::perf::{Counter, CounterSample, CpuRead, GroupRead, Missing, Reason};
use crate::stat;
use std::collections::BTreeMap;
use std::io::{Read, Seek};

const START: u64 = 1_000_000_000;

fn header() -> Header {
    Header {
        irq_rate_hz: Some(1.0),
        host_scan_s: Some(1.0),
        hostname: Some("h".into()),
        clk_tck: Some(100),
        counters: Some(CounterInfo {
            opened: vec![Counter::Cycles, Counter::Instructions],
            missing: vec![Missing {
                counter: Counter::Smi,
                reason: Reason::NoPmu {
                    path: "/sys/bus/event_source/devices/msr".into(),
                },
                cpus: vec![],
                device: Some("/dev/cpu/0/msr: No such file or directory (os error 2)".into()),
            }],
        }),
        probes: vec!["wakeup".into()],
        steal: Some(StealSource::Exact {
            threshold_ns: 100_000,
            drain_ms: 250,
        }),
        ..Header::new(100.0, 1.7e9, START)
    }
}

fn stat_of(t: u64, cpus: &[u32]) -> stat::ProcStat {
    let mut text = format!("cpu  {} 0 {} {} 3 0 1 {} 0 0\n", 10 * t, t, 1000 + t, t / 3);
    for &c in cpus {
        // iowait going backwards once, as the kernel's does.
        let iowait = if t == 7 { 1 } else { 2 + t };
        text.push_str(&format!(
            "cpu{c} {} 0 {} {} {iowait} 0 {} {} 0 0\n",
            5 * t + c as u64,
            t,
            500 + t * 3,
            t % 4,
            t / 2
        ));
    }
    stat::parse(&text, "t").unwrap()
}

fn irq_of(t: u64, extra_row: bool) -> interrupts::Interrupts {
    let mut text = format!(
        "           CPU0       CPU1\n LOC: {} {} Local timer interrupts\n ERR: 0\n",
        100 * t,
        90 * t
    );
    if extra_row {
        text.push_str(&format!(" 29: {} 0 PCI-MSIX virtio1-input.0\n", t));
    }
    interrupts::parse(&text, "i").unwrap()
}

fn counters_at(t: u64, i: u64) -> CounterSample {
    CounterSample {
        t_ns: t,
        cpus: vec![CpuRead {
            cpu: 0,
            groups: vec![GroupRead {
                enabled_ns: i * 10_000_000,
                running_ns: i * 5_000_000,
                // Cycles wraps past 2^64 between the second and third read.
                counts: [
                    (
                        Counter::Cycles,
                        (u64::MAX - 15_000_000).wrapping_add(i * 10_000_000),
                    ),
                    (Counter::Instructions, i * 7_000_000),
                ]
                .into(),
            }],
        }],
    }
}

fn probe(t: u64, cpu: Option<u32>) -> ProbeRecord {
    ProbeRecord {
        probe: "wakeup".into(),
        cpu,
        start_ns: t,
        wall_ns: 1_000_000_000,
        samples: 200,
        p50_ns: 40_000,
        p99_ns: 90_000,
        max_ns: 1_500_000,
        buckets: vec![(50_000, 150), (100_000, 48), (1_600_000, 2)],
    }
}

fn vcpu(pid: u32, tid: u32, i: u32, vm: &str) -> VcpuEntry {
    VcpuEntry {
        pid,
        tid,
        vcpu: i,
        vm: vm.into(),
    }
}

/// Writes a recording with every frame kind and returns it with the
/// records a reader must give back, in order.
fn steal_episodes(t: u64) -> Vec<StealEpisodeRecord> {
    vec![
        StealEpisodeRecord {
            t_ns: t,
            cpu: 0,
            ns: 250_000,
            victim: None,
        },
        StealEpisodeRecord {
            t_ns: t + 7,
            cpu: 1,
            ns: 12_000_000,
            victim: Some(StealVictimRecord {
                tid: 42,
                pid: 40,
                comm: "postgres".into(),
            }),
        },
    ]
}

fn fixture() -> (Vec<u8>, Vec<Record>) {
    let mut f = tempfile::tempfile().unwrap();
    let mut w = RecordingWriter::create(f.try_clone().unwrap(), "fixture", &header()).unwrap();
    let mut expect = Vec::new();
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    files.insert("/proc/stat".into(), b"cpu  1 2 3 4\n".to_vec());
    files.insert("/proc/cmdline".into(), b"quiet\n".to_vec());
    w.checkpoint(START + 1, &files).unwrap();
    expect.push(Record::Checkpoint {
        t_ns: START + 1,
        files: files.clone(),
    });
    let ms = 1_000_000;
    let mut stat_batch = Vec::new();
    let flush_stat = |batch: &mut Vec<StatSample>, expect: &mut Vec<Record>| {
        if !batch.is_empty() {
            expect.push(Record::Stat(std::mem::take(batch)));
        }
    };
    for t in 0..12u64 {
        // cpu1 goes offline at t=5 and comes back at t=9: two batch splits.
        let cpus: &[u32] = if (5..9).contains(&t) { &[0] } else { &[0, 1] };
        if t == 5 || t == 9 {
            flush_stat(&mut stat_batch, &mut expect);
        }
        let s = stat_of(t, cpus);
        let t_ns = START + 10 * ms * (t + 1);
        w.stat(t_ns, &s).unwrap();
        stat_batch.push(StatSample { t_ns, stat: s });
        if t == 2 {
            // Counters read with the stat samples.
            for i in 0..3 {
                let c = counters_at(t_ns + i, i);
                w.counters(&c);
            }
            w.irq(t_ns, &irq_of(1, false)).unwrap();
            w.irq(t_ns + 1, &irq_of(2, false)).unwrap();
            w.vcpu(t_ns, &[]).unwrap();
            w.vcpu(
                t_ns,
                &[(
                    vcpu(10, 11, 0, "a"),
                    ThreadTimes {
                        run_ns: 5,
                        wait_ns: 1,
                    },
                )],
            )
            .unwrap();
            w.probe(probe(t_ns, Some(0)));
            w.probe(probe(t_ns, None));
            w.steal(steal_episodes(t_ns));
        }
    }
    w.flush().unwrap();
    flush_stat(&mut stat_batch, &mut expect);
    let t_irq = START + 30 * ms;
    let irq = |t, x| IrqSample {
        t_ns: t,
        irq: irq_of(x, false),
    };
    expect.push(Record::Irq(vec![irq(t_irq, 1), irq(t_irq + 1, 2)]));
    let v0 = vcpu(10, 11, 0, "a");
    expect.push(Record::Vcpu(vec![VcpuSample {
        t_ns: t_irq,
        threads: vec![(
            v0.clone(),
            ThreadTimes {
                run_ns: 5,
                wait_ns: 1,
            },
        )],
    }]));
    expect.push(Record::Counters(
        (0..3).map(|i| counters_at(t_irq + i, i)).collect(),
    ));
    expect.push(Record::Probes(vec![
        probe(t_irq, Some(0)),
        probe(t_irq, None),
    ]));
    expect.push(Record::Steal(steal_episodes(t_irq)));

    // Table changes: a new interrupt source, a second vCPU.
    let t2 = START + 200 * ms;
    w.irq(t2, &irq_of(3, false)).unwrap();
    w.irq(t2 + 1, &irq_of(4, true)).unwrap();
    let th = |r, w| ThreadTimes {
        run_ns: r,
        wait_ns: w,
    };
    let v1 = vcpu(10, 12, 1, "a");
    w.vcpu(t2, &[(v0.clone(), th(9, 2))]).unwrap();
    w.vcpu(t2 + 2, &[(v0.clone(), th(8, 3)), (v1.clone(), th(1, 0))])
        .unwrap();
    expect.push(Record::Irq(vec![irq(t2, 3)]));
    expect.push(Record::Vcpu(vec![VcpuSample {
        t_ns: t2,
        threads: vec![(v0.clone(), th(9, 2))],
    }]));
    w.note(t2 + 3, "host scan: something").unwrap();
    expect.push(Record::Note {
        t_ns: t2 + 3,
        text: "host scan: something".into(),
    });
    files.insert("/proc/stat".into(), b"cpu  9 9 9 9\n".to_vec());
    w.checkpoint(t2 + 4, &files).unwrap();
    expect.push(Record::Irq(vec![IrqSample {
        t_ns: t2 + 1,
        irq: irq_of(4, true),
    }]));
    expect.push(Record::Vcpu(vec![VcpuSample {
        t_ns: t2 + 2,
        threads: vec![(v0, th(8, 3)), (v1, th(1, 0))],
    }]));
    expect.push(Record::Checkpoint {
        t_ns: t2 + 4,
        files,
    });
    let end = EndInfo {
        end_mono_ns: t2 + 5,
        reason: "signal".into(),
        stat_samples: 12,
        kvm_clock: Some(crate::kvmclock::KvmClockAnchor {
            mono_ns: t2 + 5,
            kvm_ns: t2 + 77_000_005,
        }),
    };
    w.finish(&end).unwrap();
    expect.push(Record::End(end));
    let mut bytes = Vec::new();
    f.rewind().unwrap();
    f.read_to_end(&mut bytes).unwrap();
    (bytes, expect)
}

/// Everything a reader gives for `bytes`: records, truncation note, or the error.
fn read_all(bytes: &[u8]) -> Result<(Vec<Record>, Option<String>), String> {
    let mut r =
        RecordingReader::new(bytes, bytes.len() as u64, "rec.ssr").map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().map_err(|e| e.to_string())? {
        out.push(rec);
    }
    Ok((out, r.truncation().map(str::to_string)))
}

#[test]
fn every_frame_kind_round_trips() {
    let (bytes, expect) = fixture();
    let r = RecordingReader::new(bytes.as_slice(), bytes.len() as u64, "x").unwrap();
    assert_eq!(r.header(), &header());
    let (got, note) = read_all(&bytes).unwrap();
    assert_eq!(note, None);
    assert_eq!(got.len(), expect.len());
    for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
        assert_eq!(g, e, "record {i}");
    }
    // The text of a decoded sample is what the kernel printed.
    let Record::Stat(s) = &got[1] else {
        panic!("{:?}", got[1])
    };
    let text = stat::render_cpu_lines(&s[0].stat);
    assert!(
        text.starts_with("cpu  0 0 0 1000 3 0 1 0 0 0\ncpu0 0 0 0 500 2"),
        "{text}"
    );
}

#[test]
fn a_cut_at_any_byte_reads_a_prefix_or_fails_in_the_header() {
    let (bytes, expect) = fixture();
    let header_end = {
        let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        8 + 9 + len
    };
    for cut in 0..bytes.len() {
        match read_all(&bytes[..cut]) {
            Err(e) => {
                assert!(cut < header_end, "cut at {cut}: {e}");
                assert!(e.starts_with("rec.ssr: offset "), "{e}");
                assert!(!e.contains('\n'));
            }
            Ok((got, note)) => {
                assert!(cut >= header_end, "cut at {cut} read without a header");
                assert_eq!(got[..], expect[..got.len()], "cut at {cut}");
                // At a frame boundary the file is simply shorter; inside a frame it says so.
                if let Some(n) = note {
                    assert!(n.contains("incomplete") || n.contains("CRC"), "{n}");
                }
            }
        }
    }
}

#[test]
fn a_flipped_byte_is_never_read_silently() {
    let (bytes, expect) = fixture();
    // Frame boundaries, to tell length fields from the rest.
    let mut starts = Vec::new();
    let mut at = 8;
    while at < bytes.len() {
        starts.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 9 + len;
    }
    let last = *starts.last().unwrap();
    for pos in 0..last {
        let mut b = bytes.clone();
        b[pos] ^= 0x5a;
        let in_len = starts.iter().any(|&s| (s..s + 4).contains(&pos));
        match read_all(&b) {
            Err(e) => {
                assert!(e.starts_with("rec.ssr: offset "), "{e}");
                assert!(!e.contains('\n'));
            }
            Ok((got, note)) => {
                // Only a length field can make a frame seem to run past the end.
                assert!(in_len, "flip at {pos} not noticed");
                assert!(
                    note.is_some_and(|n| n.contains("incomplete")),
                    "flip at {pos}"
                );
                assert!(got.len() < expect.len());
            }
        }
    }
    let mut b = bytes.clone();
    b[0] = b'x';
    assert!(read_all(&b)
        .unwrap_err()
        .contains("not a stealscope recording"));
}

#[test]
fn a_crash_s_zero_tail_and_a_bad_last_frame_are_cut_offs() {
    let (bytes, expect) = fixture();
    let mut b = bytes.clone();
    b.extend_from_slice(&[0u8; 4096]);
    let (got, note) = read_all(&b).unwrap();
    assert_eq!(got, expect);
    assert!(note.unwrap().contains("zero-filled tail"));
    let mut b = bytes.clone();
    let n = b.len();
    b[n - 1] ^= 1;
    let (got, note) = read_all(&b).unwrap();
    assert_eq!(got[..], expect[..expect.len() - 1]);
    assert!(note.unwrap().contains("bad CRC in the last frame (end"));
}

#[test]
fn unknown_kinds_are_skipped_and_newer_readers_required_are_named() {
    let (bytes, expect) = fixture();
    // A frame of kind 200 between the header and the first checkpoint.
    let hlen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let cut = 8 + 9 + hlen;
    let mut frame = vec![3, 0, 0, 0, 200, 1, 2, 3];
    let mut h = crc32fast::Hasher::new();
    h.update(&frame[4..]);
    frame.extend_from_slice(&h.finalize().to_le_bytes());
    let mut b = bytes[..cut].to_vec();
    b.extend_from_slice(&frame);
    b.extend_from_slice(&bytes[cut..]);
    let (got, _) = read_all(&b).unwrap();
    assert_eq!(
        got[0],
        Record::Unknown {
            kind: 200,
            offset: cut as u64
        }
    );
    assert_eq!(got[1..], expect[..]);

    let mut h = header();
    h.min_reader_version = 2;
    let f = tempfile::tempfile().unwrap();
    let mut w = RecordingWriter::create(f.try_clone().unwrap(), "x", &h).unwrap();
    w.flush().unwrap();
    let mut b = Vec::new();
    let mut f = f;
    f.rewind().unwrap();
    f.read_to_end(&mut b).unwrap();
    let e = read_all(&b).unwrap_err();
    assert!(e.contains("needs a reader of version 2"), "{e}");
}

#[test]
fn absurd_lengths_are_errors_not_allocations() {
    let (bytes, _) = fixture();
    let hlen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let at = 8 + 9 + hlen;
    let mut b = bytes.clone();
    b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = read_all(&b).unwrap_err();
    assert!(
        e.contains(&format!("offset {at}: frame length")) && e.contains("absurd"),
        "{e}"
    );
}

proptest::proptest! {
    #[test]
    fn random_frames_after_a_valid_header_never_panic(
        tail in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        frames in proptest::collection::vec((1u8..13, proptest::bool::ANY, proptest::collection::vec(proptest::num::u8::ANY, 0..80)), 0..6),
    ) {
        let (bytes, _) = fixture();
        let hlen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let mut b = bytes[..8 + 9 + hlen].to_vec();
        // Well-framed garbage of every kind (CRC right), so the payload decoders are reached.
        for (kind, plain, mut payload) in frames {
            if plain {
                // Flag byte "not deflated": the series decoders see the bytes.
                payload.insert(0, 0);
            }
            b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            b.push(kind);
            b.extend_from_slice(&payload);
            let mut h = crc32fast::Hasher::new();
            h.update(&[kind]);
            h.update(&payload);
            b.extend_from_slice(&h.finalize().to_le_bytes());
        }
        b.extend_from_slice(&tail);
        let _ = read_all(&b);
    }

    #[test]
    fn mutated_payloads_with_a_right_crc_never_panic(
        frame in proptest::num::usize::ANY,
        flips in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..6),
    ) {
        let (mut b, _) = fixture();
        let mut starts = Vec::new();
        let mut at = 8;
        while at < b.len() {
            starts.push(at);
            at += 9 + u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        }
        // Any frame but the header; the payload changed, the CRC made to fit.
        let s = starts[1 + frame % (starts.len() - 1)];
        let len = u32::from_le_bytes(b[s..s + 4].try_into().unwrap()) as usize;
        if len > 0 {
            for (pos, v) in flips {
                b[s + 5 + pos % len] = v;
            }
            let mut h = crc32fast::Hasher::new();
            h.update(&b[s + 4..s + 5 + len]);
            let crc = h.finalize().to_le_bytes();
            b[s + 5 + len..s + 9 + len].copy_from_slice(&crc);
        }
        let _ = read_all(&b);
    }

    #[test]
    fn mutated_recordings_never_panic(flips in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..8)) {
        let (mut b, _) = fixture();
        let n = b.len();
        for (pos, v) in flips {
            b[pos % n] = v;
        }
        let _ = read_all(&b);
    }
}

/// A header written before issue 30 (no `steal`) reads as such: None,
/// and the rest as it was.
#[test]
fn a_header_without_a_steal_source_loads() {
    let mut v = serde_json::to_value(header()).unwrap();
    v.as_object_mut().unwrap().remove("steal");
    let h: Header = serde_json::from_value(v).unwrap();
    assert_eq!(h.steal, None);
    assert_eq!(h.probes, header().probes);
}
