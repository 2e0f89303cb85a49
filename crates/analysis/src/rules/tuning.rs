//! Tuning defaults that are wrong for a VM: these cost latency or throughput
//! but are not emergencies, so they are info.

use crate::finding::{evidence, Evidence, Finding, Severity};
use crate::roles::Roles;
use stealscope_model::MachineModel;

/// Disks that are virtual (virtio-blk, Xen) or NVMe: the host or the device
/// already schedules, so a guest elevator only adds latency and CPU.
fn is_virtual_or_nvme(dev: &str) -> bool {
    dev.starts_with("vd") || dev.starts_with("xvd") || dev.starts_with("nvme")
}

/// Schedulers that do no reordering ("noop" is the single-queue name).
const PASSTHROUGH_SCHEDULERS: &[&str] = &["none", "noop"];

pub fn io_scheduler(m: &MachineModel, out: &mut Vec<Finding>) {
    let bad: Vec<_> =
        m.t1.blocks
            .iter()
            .filter(|b| is_virtual_or_nvme(&b.device))
            .filter(|b| {
                b.scheduler
                    .as_deref()
                    .is_some_and(|s| !PASSTHROUGH_SCHEDULERS.contains(&s))
            })
            .collect();
    if bad.is_empty() {
        return;
    }
    let target = if bad.iter().all(|b| b.available.iter().any(|a| a == "none")) {
        "none"
    } else {
        "noop"
    };
    let list: Vec<String> = bad
        .iter()
        .map(|b| format!("{} ({})", b.device, b.scheduler.as_deref().unwrap_or("?")))
        .collect();
    let first = &bad[0].device;
    out.push(
        Finding::new("tuning.io-scheduler", Severity::Info, format!("Virtual/NVMe disk with an I/O scheduler: {}", list.join(", ")))
            .evidence("devices", Evidence::of(&bad.iter().map(|b| evidence!{"device" => b.device, "scheduler" => b.scheduler, "available" => b.available}).collect::<Vec<_>>()))
            .files(&["/sys/block/*/queue/scheduler"])
            .remedy(format!(
                "{} \
                 Now: `echo {target} > /sys/block/{first}/queue/scheduler`. Persistent: a udev rule \
                 `ACTION==\"add|change\", KERNEL==\"vd[a-z]*|nvme[0-9]*n[0-9]*\", ATTR{{queue/scheduler}}=\"{target}\"` \
                 in /etc/udev/rules.d/60-io-scheduler.rules.",
                if Roles::of(m).host_only() {
                    "An NVMe device orders I/O itself; an elevator on the host adds latency and CPU to every \
                     request, those of every VM on the disk included."
                } else {
                    "The host (or the NVMe device) already orders I/O; a guest elevator adds latency and CPU per \
                     request."
                }
            ))
            .reference("Documentation/block/switching-sched.rst")
            .case("guest-micro-jitter-case.txt"),
    );
}

pub fn cpufreq_governor(m: &MachineModel, out: &mut Vec<Finding>) {
    let bad: Vec<_> =
        m.t1.cpufreq
            .iter()
            .filter(|f| f.governor.as_deref().is_some_and(|g| g != "performance"))
            .collect();
    if bad.is_empty() {
        return;
    }
    let mut govs: Vec<&str> = bad.iter().filter_map(|f| f.governor.as_deref()).collect();
    govs.sort_unstable();
    govs.dedup();
    out.push(
        Finding::new(
            "tuning.cpufreq-governor",
            Severity::Info,
            format!("cpufreq governor {} on {} CPU(s), not performance", govs.join("/"), bad.len()),
        )
        .evidence("governors", Evidence::of(&govs))
        .evidence("cpus", Evidence::of(&bad.iter().map(|f| f.cpu).collect::<Vec<_>>()))
        .evidence("driver", Evidence::of(&bad[0].driver))
        .files(&["/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"])
        .remedy(format!(
            "{} `cpupower frequency-set -g performance` (or write performance to each scaling_governor); persist \
             with tuned (`tuned-adm profile latency-performance`) or a systemd unit.",
            if Roles::of(m).host_only() {
                "A power-saving governor on a KVM host runs a vCPU that wakes from idle slowly until the governor \
                 ramps up: its guest sees latency that no guest tool explains."
            } else {
                "This guest controls CPU frequency; a power-saving governor ramps up late after idle, adding \
                 latency to bursts."
            }
        ))
        .reference("Documentation/admin-guide/pm/cpufreq.rst"),
    );
}

/// Dirty data allowed before writers are throttled; above 1 GiB a flush is a
/// multi-second burst of I/O that stalls the guest (and its neighbours).
pub const DIRTY_LIMIT_BYTES: u64 = 1 << 30;
/// Background writeback starting this late lets a burst build up.
pub const DIRTY_BACKGROUND_BYTES: u64 = 512 << 20;

pub fn dirty_writeback(m: &MachineModel, out: &mut Vec<Finding>) {
    let o = &m.t1;
    let d = &o.dirty;
    let dirtyable = o
        .memory
        .as_ref()
        .map(|mem| mem.available_bytes.unwrap_or(mem.total_bytes));
    let limit = |bytes: Option<u64>, ratio: Option<u64>| -> Option<u64> {
        match (bytes, ratio, dirtyable) {
            (Some(b), _, _) if b > 0 => Some(b),
            (_, Some(r), Some(mem)) => Some(mem / 100 * r),
            _ => None,
        }
    };
    let hard = limit(d.dirty_bytes, d.dirty_ratio);
    let bg = limit(d.dirty_background_bytes, d.dirty_background_ratio);
    let hard_big = hard.is_some_and(|v| v > DIRTY_LIMIT_BYTES);
    let bg_big = bg.is_some_and(|v| v > DIRTY_BACKGROUND_BYTES);
    if !hard_big && !bg_big {
        return;
    }
    let mib = |v: Option<u64>| v.map(|b| b >> 20);
    out.push(
        Finding::new(
            "tuning.dirty-writeback",
            Severity::Info,
            format!(
                "Dirty page limits allow large writeback bursts ({} MiB before throttling, background from {} MiB)",
                mib(hard).map_or("?".into(), |v| v.to_string()),
                mib(bg).map_or("?".into(), |v| v.to_string())
            ),
        )
        .evidence("dirty_limit_mib", Evidence::of(&mib(hard)))
        .evidence("dirty_background_mib", Evidence::of(&mib(bg)))
        .evidence("dirty_ratio", Evidence::of(&d.dirty_ratio))
        .evidence("dirty_background_ratio", Evidence::of(&d.dirty_background_ratio))
        .evidence("dirty_bytes", Evidence::of(&d.dirty_bytes))
        .evidence("dirty_background_bytes", Evidence::of(&d.dirty_background_bytes))
        .evidence("dirtyable_mib", Evidence::of(&mib(dirtyable)))
        .files(&["/proc/sys/vm/dirty_*", "/proc/meminfo"])
        .remedy(format!(
            "{} Use byte limits: `sysctl -w vm.dirty_background_bytes=134217728 vm.dirty_bytes=536870912` \
             (128/512 MiB) and persist them in /etc/sysctl.d/.",
            if Roles::of(m).host_only() {
                "Ratios scale with RAM, so a large host buffers gigabytes (the writes of VMs whose disks use \
                 cache=writeback among them) and then flushes them in one burst that stalls those VMs' I/O."
            } else {
                "Ratios scale with RAM, so a large VM buffers gigabytes and then flushes them in one burst that \
                 stalls writers and competes with neighbours on the host's disks."
            }
        ))
        .reference("Documentation/admin-guide/sysctl/vm.rst"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{meminfo, TestMachine};

    #[test]
    fn an_elevator_on_a_virtio_disk_fires_and_none_is_silent() {
        let sched = "/sys/block/vda/queue/scheduler";
        let f = TestMachine::guest()
            .file(sched, "[mq-deadline] kyber bfq none\n")
            .run(io_scheduler);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "tuning.io-scheduler");
        let quiet = TestMachine::guest().file(sched, "[none] mq-deadline \n");
        assert!(quiet.run(io_scheduler).is_empty());
        // A real disk keeps its scheduler.
        let sda =
            TestMachine::guest().file("/sys/block/sda/queue/scheduler", "[mq-deadline] none\n");
        assert!(sda.run(io_scheduler).is_empty());
    }

    #[test]
    fn powersave_governor_fires_and_performance_is_silent() {
        let gov = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor";
        let f = TestMachine::guest()
            .file(gov, "powersave\n")
            .run(cpufreq_governor);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].id, "tuning.cpufreq-governor");
        assert!(TestMachine::guest()
            .file(gov, "performance\n")
            .run(cpufreq_governor)
            .is_empty());
    }

    fn dirty(available_kb: u64) -> TestMachine {
        TestMachine::guest()
            .file("/proc/meminfo", meminfo(available_kb, available_kb, 0))
            .file("/proc/sys/vm/dirty_ratio", "20\n")
            .file("/proc/sys/vm/dirty_background_ratio", "10\n")
            .file("/proc/sys/vm/dirty_bytes", "0\n")
            .file("/proc/sys/vm/dirty_background_bytes", "0\n")
    }

    #[test]
    fn ratios_of_a_big_memory_fire_and_of_a_small_one_do_not() {
        // 20 % of 16 GiB = 3.2 GiB dirty allowed: over the 1 GiB limit.
        let f = dirty(16 << 20).run(dirty_writeback);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "tuning.dirty-writeback");
        // 20 % of 2 GiB = 410 MiB, background 205 MiB: both under the limits.
        assert!(dirty(2 << 20).run(dirty_writeback).is_empty());
    }
}
