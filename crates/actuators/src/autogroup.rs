//! An autogroup's nice (/proc/PID/autogroup): the weight of the scheduling
//! group of a VM whose process sits in the root cpu cgroup. The kernel
//! (kernel/sched/autogroup.c proc_sched_autogroup_set_nice) sets the
//! group's shares to the nice's weight; a negative nice needs CAP_SYS_NICE.

use crate::error::ApplyError;
use std::io::ErrorKind;
use stealscope_readers::autogroup;

fn path(pid: u32) -> String {
    format!("/proc/{pid}/autogroup")
}

fn gone(pid: u32) -> ApplyError {
    ApplyError::Gone {
        what: format!("process {pid}"),
    }
}

/// The nice of `pid`'s autogroup, refused when the process is no longer in
/// autogroup `id` (a new session since the plan: another group's weight).
pub fn nice(pid: u32, id: u64) -> Result<i32, ApplyError> {
    let p = path(pid);
    let text = std::fs::read_to_string(&p).map_err(|e| match e.kind() {
        ErrorKind::NotFound => gone(pid),
        _ => ApplyError::io(&p, e),
    })?;
    match autogroup::parse(&text, &p).map_err(|e| ApplyError::Other(e.to_string()))? {
        Some(ag) if ag.id == id => Ok(ag.nice),
        Some(ag) => Err(ApplyError::Refused(format!(
            "{p}: the process is in autogroup-{} now, not autogroup-{id}; nothing was changed, plan again",
            ag.id
        ))),
        None => Err(ApplyError::Refused(format!(
            "{p}: the process is in the root autogroup now, not autogroup-{id}; nothing was changed, plan again"
        ))),
    }
}

/// Sets the nice of `pid`'s autogroup, after checking it is still `id`.
pub fn set_nice(pid: u32, id: u64, value: i32) -> Result<(), ApplyError> {
    let p = path(pid);
    if !(-20..=19).contains(&value) {
        return Err(ApplyError::Refused(format!(
            "{p}: nice {value} is outside [-20, 19]"
        )));
    }
    nice(pid, id)?;
    std::fs::write(&p, value.to_string()).map_err(|e| match e.kind() {
        ErrorKind::NotFound => gone(pid),
        ErrorKind::PermissionDenied => ApplyError::Denied {
            path: p.clone(),
            need: "root (CAP_SYS_NICE) lowers an autogroup's nice".into(),
        },
        _ => ApplyError::io(&p, format!("writing {value}: {e}")),
    })
}
