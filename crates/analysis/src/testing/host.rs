//! Host-side files for [`TestMachine`]: VMM processes with named vCPU
//! threads, other host processes, and the files the host rules read beside
//! them (cgroups, autogroups, NUMA nodes, KVM debugfs), as the kernel prints
//! them. Run and wait times go into each thread's schedstat, counting from a
//! base at t0 so that deltas do not start from zero.

use super::TestMachine;

/// schedstat at t0 (ns of run, ns of wait).
const BASE_NS: (u64, u64) = (50_000_000_000, 5_000_000_000);

/// One thread's run and run-queue wait over the interval, seconds.
#[derive(Debug, Clone, Copy)]
pub struct Busy {
    pub run_s: f64,
    pub wait_s: f64,
}

pub const fn busy(run_s: f64, wait_s: f64) -> Busy {
    Busy { run_s, wait_s }
}

/// Who ran while a watched thread waited: (tid, tgid, comm, seconds).
pub type Ran<'a> = (u32, u32, &'a str, f64);

fn schedstat(run_ns: u64, wait_ns: u64) -> String {
    format!("{run_ns} {wait_ns} 1000\n")
}

fn ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

impl TestMachine {
    /// A thread of process `pid` with its name and what it did.
    pub fn thread(self, pid: u32, tid: u32, comm: &str, b: Busy) -> Self {
        let dir = format!("/proc/{pid}/task/{tid}");
        self.file(&format!("{dir}/comm"), format!("{comm}\n"))
            .files(
                &format!("{dir}/schedstat"),
                &schedstat(BASE_NS.0, BASE_NS.1),
                &schedstat(BASE_NS.0 + ns(b.run_s), BASE_NS.1 + ns(b.wait_s)),
            )
    }

    /// A host process (not a VM) of one thread.
    pub fn process(self, pid: u32, comm: &str, b: Busy) -> Self {
        self.file(&format!("/proc/{pid}/comm"), format!("{comm}\n"))
            .file(&format!("/proc/{pid}/cmdline"), format!("{comm}\0"))
            .thread(pid, pid, comm, b)
    }

    /// A QEMU/KVM VM named `name`: its main thread (idle) at `pid`, vCPU `i`
    /// at tid `pid + 1 + i` named "CPU i/KVM", as `-name NAME,debug-threads=on`
    /// makes them.
    pub fn vm(self, pid: u32, name: &str, vcpus: &[Busy]) -> Self {
        let cmdline = format!("qemu-system-x86_64\0-name\0{name},debug-threads=on\0");
        let mut m = self
            .file(&format!("/proc/{pid}/comm"), "qemu-system-x86\n")
            .file(&format!("/proc/{pid}/cmdline"), cmdline)
            .thread(pid, pid, "qemu-system-x86", busy(0.0, 0.0));
        for (i, b) in vcpus.iter().enumerate() {
            m = m.thread(pid, pid + 1 + i as u32, &format!("CPU {i}/KVM"), *b);
        }
        m
    }

    /// A task's /proc/<pid>/task/<tid>/status lines (Cpus_allowed_list,
    /// VmSwap, ...).
    pub fn status(self, pid: u32, tid: u32, lines: &str) -> Self {
        self.file(&format!("/proc/{pid}/task/{tid}/status"), lines)
    }

    /// Process `pid` (its main thread) in cgroup v2 group `group` with
    /// `cpu.weight` `weight`, under a cgroup2 mount at /sys/fs/cgroup.
    pub fn cpu_group(self, pid: u32, group: &str, weight: u64) -> Self {
        self.file(
            "/proc/mounts",
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec 0 0\n",
        )
        .file(
            &format!("/proc/{pid}/task/{pid}/cgroup"),
            format!("0::{group}\n"),
        )
        .file(
            &format!("/sys/fs/cgroup{group}/cpu.weight"),
            format!("{weight}\n"),
        )
    }

    /// Autogroups on or off, and process `pid` in autogroup `id` (nice 0).
    pub fn autogroup(self, pid: u32, id: u32, enabled: bool) -> Self {
        self.file(
            "/proc/sys/kernel/sched_autogroup_enabled",
            if enabled { "1\n" } else { "0\n" },
        )
        .file(
            &format!("/proc/{pid}/autogroup"),
            format!("/autogroup-{id} nice 0\n"),
        )
    }

    /// One NUMA node per CPU list given ("0", "1", ...).
    pub fn nodes(mut self, cpulists: &[&str]) -> Self {
        for (i, cpus) in cpulists.iter().enumerate() {
            self = self.file(
                &format!("/sys/devices/system/node/node{i}/cpulist"),
                format!("{cpus}\n"),
            );
        }
        self
    }

    /// The scheduler-event collector's reading on both sides
    /// (/stealscope/sched.json, as a live capture stores it): per watched
    /// thread, who ran while it waited, `(tid, tgid, comm, seconds)` over
    /// the interval (zero at t0).
    pub fn sched_reading(mut self, waits: &[(u32, &[Ran])]) -> Self {
        let side = |at_end: bool| {
            let threads: Vec<String> = waits
                .iter()
                .map(|(tid, by)| {
                    let by: Vec<String> = by
                        .iter()
                        .map(|(t, g, comm, s)| {
                            let ns = if at_end { ns(*s) } else { 0 };
                            format!(
                                r#"{{"tid":{t},"tgid":{g},"comm":"{comm}","kthread":false,"ns":{ns}}}"#
                            )
                        })
                        .collect();
                    format!(
                        r#"{{"tid":{tid},"by":[{}],"irq_ns":0,"idle_ns":0,"unknown_ns":0,"episodes":{{"buckets":[],"count":0,"sum_ns":0,"max_ns":0,"over_1ms":0,"over_10ms":0}}}}"#,
                        by.join(",")
                    )
                })
                .collect();
            let (t, events) = if at_end {
                (6_000_000_000u64, 9000)
            } else {
                (1_000_000_000, 0)
            };
            format!(
                r#"{{"route":"tracefs","monotonic_ns":{t},"stats":{{"events":{events},"lost_events":0,"overflows":0}},"threads":[{}]}}"#,
                threads.join(",")
            )
        };
        self = self.files("/stealscope/sched.json", &side(false), &side(true));
        self
    }

    /// KVM debugfs counters of VM `pid` at t0 and t1.
    pub fn kvm_debugfs(mut self, pid: u32, counters: &[(&str, u64, u64)]) -> Self {
        for (name, a, b) in counters {
            self = self.files(
                &format!("/sys/kernel/debug/kvm/{pid}-11/{name}"),
                &format!("{a}\n"),
                &format!("{b}\n"),
            );
        }
        self
    }
}
