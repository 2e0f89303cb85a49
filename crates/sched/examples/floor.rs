//! The cost floor under the collectors' programs: `floor OBJECT SECS`
//! attaches the empty programs of bench/floor.bpf.c (built by hand with
//! clang, see that file) so that `kernel.bpf_stats_enabled` shows what a
//! run that does nothing costs on each hook (the accounting's own clock
//! reads and the dispatch), then holds them SECS seconds.

use aya::programs::{BtfTracePoint, RawTracePoint};
use aya::{Btf, Ebpf};

const TP_BTF: &[(&str, &str)] = &[
    ("floor_switch", "sched_switch"),
    ("floor_wakeup", "sched_wakeup"),
    ("floor_wakeup_new", "sched_wakeup_new"),
    ("floor_migrate", "sched_migrate_task"),
    ("floor_hrtimer", "hrtimer_expire_exit"),
];
const RAW: &[(&str, &str)] = &[
    ("floor_hardirq_entry", "irq_handler_entry"),
    ("floor_softirq_entry", "softirq_entry"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().ok_or("usage: floor OBJECT SECS")?;
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let bytes = std::fs::read(path)?;
    let mut ebpf = Ebpf::load(&bytes)?;
    let btf = Btf::from_sys_fs()?;
    for (name, tp) in TP_BTF {
        let p: &mut BtfTracePoint = ebpf.program_mut(name).ok_or(*name)?.try_into()?;
        p.load(tp, &btf)?;
        p.attach()?;
    }
    for (name, tp) in RAW {
        let p: &mut RawTracePoint = ebpf.program_mut(name).ok_or(*name)?.try_into()?;
        p.load()?;
        p.attach(tp)?;
    }
    println!("started floor");
    std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    Ok(())
}
