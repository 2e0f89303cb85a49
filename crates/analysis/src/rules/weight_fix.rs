//! How to lower a host process's CPU weight on the host at hand. With
//! autogroups on (kernel.sched_autogroup_enabled=1) a process in the root
//! cpu cgroup runs in its session's autogroup, and CFS shares CPU between
//! groups before threads: a task's nice value then orders it only against
//! tasks of its own session (sched(7), "The autogroup feature";
//! kernel/sched/autogroup.c), so `renice` does nothing against vCPUs in
//! other sessions. The session's weight is the nice value written to
//! /proc/PID/autogroup (proc_sched_autogroup_set_nice). A live test
//! (crates/cli/tests/host_who.rs) applies both and reads the
//! process's own schedstat.

use stealscope_model::MachineModel;

/// The command that lowers process `pid`'s weight here, with the cgroup
/// alternative: no sentence break inside (verdict fixes cut at ". ").
pub fn lower_weight(m: &MachineModel, pid: Option<u32>) -> String {
    let cmd = lower_weight_short(m, pid);
    if m.t1.host.autogroups_on() {
        format!(
            "{cmd}, its whole session's weight: with autogroups on, `renice` does not act across \
             sessions; or a cpu cgroup with a lower cpu.weight"
        )
    } else {
        format!("{cmd}, or a cpu cgroup with a lower cpu.weight")
    }
}

/// A short form for one-line fixes: the command alone.
pub fn lower_weight_short(m: &MachineModel, pid: Option<u32>) -> String {
    let pid = pid.map_or_else(|| "PID".to_string(), |p| p.to_string());
    if m.t1.host.autogroups_on() {
        format!("`echo 10 > /proc/{pid}/autogroup`")
    } else {
        format!("`renice -n 10 -p {pid}`")
    }
}
