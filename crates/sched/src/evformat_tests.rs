//! Format files as kernel 6.18 writes them (tests/fixtures/formats), and
//! records laid out by their offsets.

use super::*;

fn fixture(name: &str) -> EventFormat {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/formats")
        .join(format!("{name}.format"));
    EventFormat::parse(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn put(rec: &mut [u8], f: Field, v: i64) {
    rec[f.offset..f.offset + f.size].copy_from_slice(&v.to_ne_bytes()[..f.size]);
}

fn decoder() -> (Decoder, EventFormat, EventFormat, EventFormat) {
    let sw = fixture("sched_switch");
    let wk = fixture("sched_wakeup");
    let mg = fixture("sched_migrate_task");
    let si = fixture("softirq_entry");
    let d = Decoder::new(&sw, &[wk.clone(), mg.clone(), si]).unwrap();
    (d, sw, wk, mg)
}

#[test]
fn parses_fields_ids_and_arrays() {
    let sw = fixture("sched_switch");
    assert_eq!(sw.name, "sched_switch");
    assert!(sw.id > 0);
    let c = sw.field("next_comm").unwrap();
    assert_eq!(c.size, 16);
    assert!(sw.field("prev_state").unwrap().signed);
    assert!(sw.field("nope").is_err());
    let mg = fixture("sched_migrate_task");
    // __data_loc char[] comm
    assert_eq!(mg.field("comm").unwrap().size, 4);
    assert!(EventFormat::parse("field:int x;\toffset:0;\tsize:4;").is_err());
}

#[test]
fn preempt_bit_from_the_print_fmt() {
    assert_eq!(preempt_bit(&fixture("sched_switch").print_fmt), 0x100);
    assert_eq!(preempt_bit("no table"), 0x100);
    assert_eq!(
        preempt_bit(r#"__print_flags(x, "|", { 0x01, "S" }, { 0x400, "N" })"#),
        0x800
    );
}

#[test]
fn decodes_switches_by_the_format_offsets() {
    let (d, sw, _, _) = decoder();
    let mut rec = vec![0u8; 64];
    put(&mut rec, sw.field("common_type").unwrap(), sw.id as i64);
    put(&mut rec, sw.field("prev_pid").unwrap(), 41);
    put(&mut rec, sw.field("next_pid").unwrap(), 42);
    let c = sw.field("next_comm").unwrap();
    rec[c.offset..c.offset + 6].copy_from_slice(b"stress");
    let pc = sw.field("prev_comm").unwrap();
    rec[pc.offset..pc.offset + 4].copy_from_slice(b"kvm1");
    let state = sw.field("prev_state").unwrap();
    let mut runnable = |s: i64| {
        put(&mut rec, state, s);
        match d.decode(1, 9, &rec).unwrap() {
            Event::Switch {
                prev_runnable,
                prev_tid,
                prev_comm,
                next_tid,
                next_comm,
                cpu,
                ts,
            } => {
                assert_eq!((prev_tid, next_tid, cpu, ts), (41, 42, 1, 9));
                assert_eq!(next_comm.as_string(), "stress");
                assert_eq!(prev_comm.as_string(), "kvm1");
                prev_runnable
            }
            e => panic!("{e:?}"),
        }
    };
    assert!(runnable(0), "R");
    assert!(runnable(0x100), "R+ (preempted)");
    assert!(!runnable(1), "S");
    assert!(!runnable(2), "D");
    assert!(!runnable(0x80), "I");
    // Too short for its fields: no event, no panic.
    assert_eq!(d.decode(1, 9, &rec[..30]), None);
}

#[test]
fn decodes_wakeups_and_migrations() {
    let (d, _, wk, mg) = decoder();
    let mut rec = vec![0u8; 40];
    put(&mut rec, wk.field("common_type").unwrap(), wk.id as i64);
    put(&mut rec, wk.field("pid").unwrap(), 7);
    put(&mut rec, wk.field("target_cpu").unwrap(), 1);
    assert_eq!(
        d.decode(0, 5, &rec),
        Some(Event::Wakeup {
            ts: 5,
            tid: 7,
            target_cpu: 1
        })
    );
    let mut rec = vec![0u8; 40];
    put(&mut rec, mg.field("common_type").unwrap(), mg.id as i64);
    put(&mut rec, mg.field("pid").unwrap(), 7);
    put(&mut rec, mg.field("orig_cpu").unwrap(), 1);
    put(&mut rec, mg.field("dest_cpu").unwrap(), 0);
    assert_eq!(
        d.decode(0, 6, &rec),
        Some(Event::Migrate {
            ts: 6,
            tid: 7,
            orig_cpu: 1,
            dest_cpu: 0
        })
    );
    // An id nobody asked for.
    put(&mut rec, mg.field("common_type").unwrap(), 9999);
    assert_eq!(d.decode(0, 6, &rec), None);
}
