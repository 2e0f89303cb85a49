//! Autogroups (CONFIG_SCHED_AUTOGROUP): every session (setsid, so every
//! `qemu -daemonize`) gets its own scheduling group while its tasks sit in
//! the root cpu cgroup, and CFS then shares CPU equally between groups, not
//! between threads. /proc/<pid>/autogroup is printed by
//! kernel/sched/autogroup.c proc_sched_autogroup_show_task():
//! `seq_printf(m, "/autogroup-%ld nice %d\n", ag->id, ag->nice)`, and is
//! empty for a task in the root autogroup (the root task group has no
//! `autogroup`). Whether the group is in effect also needs
//! /proc/sys/kernel/sched_autogroup_enabled = 1 and the task in the root
//! cpu cgroup (task_wants_autogroup); the model checks those.

use crate::error::{ReadError, Result};
use crate::Source;
use serde::{Deserialize, Serialize};

pub const ENABLED: &str = "/proc/sys/kernel/sched_autogroup_enabled";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Autogroup {
    pub id: u64,
    pub nice: i32,
}

impl Autogroup {
    /// The group's CFS weight relative to nice 0 (sched_prio_to_weight,
    /// which autogroup nice values index like a task's nice).
    pub fn relative_weight(self) -> f64 {
        nice_weight(self.nice) / 1024.0
    }
}

/// kernel/sched/core.c sched_prio_to_weight[nice + 20].
pub fn nice_weight(nice: i32) -> f64 {
    const W: [u32; 40] = [
        88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100,
        4904, 3906, 3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172,
        137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
    ];
    W[(nice.clamp(-20, 19) + 20) as usize] as f64
}

/// How the host views, the planner and the simulator name autogroup `id`
/// (as /proc/PID/autogroup does, without its slash).
pub fn group_name(id: u64) -> String {
    format!("autogroup-{id}")
}

/// The nice whose weight is nearest `weight` (1024 = nice 0) by ratio,
/// since CFS shares go by ratios of weights.
pub fn nearest_nice(weight: f64) -> i32 {
    (-20..=19)
        .min_by(|a, b| {
            let d = |n: i32| (nice_weight(n) / weight).ln().abs();
            d(*a).total_cmp(&d(*b))
        })
        .unwrap_or(0)
}

/// Parses the file; Ok(None) for the empty file of the root autogroup.
pub fn parse(text: &str, path: &str) -> Result<Option<Autogroup>> {
    let line = text.trim();
    if line.is_empty() {
        return Ok(None);
    }
    let bad = || {
        ReadError::parse(
            path,
            format!("expected \"/autogroup-N nice N\", got {line:?}"),
        )
    };
    let mut it = line.split_whitespace();
    let id = it
        .next()
        .and_then(|s| s.strip_prefix("/autogroup-"))
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    if it.next() != Some("nice") {
        return Err(bad());
    }
    let nice = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok(Some(Autogroup { id, nice }))
}

/// The autogroup of a process; Ok(None) for the root autogroup, a kernel
/// without CONFIG_SCHED_AUTOGROUP (no file) or a process that exited.
pub fn read(src: &dyn Source, pid: u32) -> Result<Option<Autogroup>> {
    let path = format!("/proc/{pid}/autogroup");
    match src.read_text(&path) {
        Ok(Some(t)) => parse(&t, &path),
        Ok(None) => Ok(None),
        Err(ReadError::Io { source, .. }) if matches!(source.raw_os_error(), Some(2) | Some(3)) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// sched_autogroup_enabled; None when the kernel has no autogroups.
pub fn enabled(src: &dyn Source) -> Result<Option<bool>> {
    Ok(src.read_value(ENABLED)?.map(|v| v.trim() == "1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(
            parse("/autogroup-123 nice 0\n", "f").unwrap(),
            Some(Autogroup { id: 123, nice: 0 })
        );
        assert_eq!(
            parse("/autogroup-7 nice -5\n", "f").unwrap(),
            Some(Autogroup { id: 7, nice: -5 })
        );
        assert_eq!(parse("", "f").unwrap(), None);
        let e = parse("autogroup 5", "/proc/9/autogroup").unwrap_err();
        assert!(e.to_string().contains("/proc/9/autogroup"), "{e}");
        assert_eq!(nice_weight(0), 1024.0);
        assert!((Autogroup { id: 1, nice: 5 }.relative_weight() - 335.0 / 1024.0).abs() < 1e-9);
        // 1, 2, 4 and 8 nice-0 tasks' worth: 1024, 1991, 3906, 7620.
        let n: Vec<i32> = [1.0, 2.0, 4.0, 8.0]
            .iter()
            .map(|k| nearest_nice(k * 1024.0))
            .collect();
        assert_eq!(n, [0, -3, -6, -9]);
        assert_eq!(nearest_nice(1e9), -20);
    }
}
