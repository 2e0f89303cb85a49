//! cpu cgroup writes: a group's weight, creating the shared group, moving a
//! process into a group. v1 (cpu.shares) and v2 (cpu.weight).

use crate::error::ApplyError;
use std::fs;
use std::io::ErrorKind;
use stealscope_placement::input::CpuController;
use stealscope_placement::CgroupRef;

fn read_num(path: &str) -> Result<u64, ApplyError> {
    let t = fs::read_to_string(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => ApplyError::io(path, "the cgroup vanished"),
        _ => ApplyError::io(path, e),
    })?;
    t.trim()
        .parse()
        .map_err(|_| ApplyError::io(path, format!("{:?} is not a number", t.trim())))
}

fn write(path: &str, value: &str) -> Result<(), ApplyError> {
    fs::write(path, value).map_err(|e| match (e.kind(), e.raw_os_error()) {
        (ErrorKind::NotFound, _) => ApplyError::io(path, "the cgroup vanished"),
        (_, Some(libc::ESRCH)) => ApplyError::Gone {
            what: format!("process {value}"),
        },
        _ => ApplyError::io(path, format!("writing {value:?}: {e}")),
    })
}

pub fn weight(g: &CgroupRef) -> Result<u64, ApplyError> {
    read_num(&g.weight_file())
}

pub fn set_weight(g: &CgroupRef, value: u64) -> Result<(), ApplyError> {
    let (_, lo, hi) = g.weight_unit();
    if !(lo..=hi).contains(&value) {
        return Err(ApplyError::Refused(format!(
            "{}: {value} is outside [{lo}, {hi}]",
            g.weight_file()
        )));
    }
    write(&g.weight_file(), &value.to_string())
}

/// Creates the group if needed (v2: enables the cpu controller in the parent).
pub fn ensure(g: &CgroupRef) -> Result<(), ApplyError> {
    if std::path::Path::new(&g.dir).is_dir() {
        return Ok(());
    }
    if g.v2 {
        if let Some(parent) = std::path::Path::new(&g.dir).parent() {
            let ctl = format!("{}/cgroup.subtree_control", parent.display());
            let cur = fs::read_to_string(&ctl).unwrap_or_default();
            if !cur.split_whitespace().any(|c| c == "cpu") {
                write(&ctl, "+cpu")?;
            }
        }
    }
    fs::create_dir(&g.dir).map_err(|e| ApplyError::io(&g.dir, e))
}

/// The cpu group `pid` is in now.
pub fn group_of(pid: u32, ctl: &CpuController) -> Result<CgroupRef, ApplyError> {
    let path = format!("/proc/{pid}/cgroup");
    let text = fs::read_to_string(&path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => ApplyError::Gone {
            what: format!("process {pid}"),
        },
        _ => ApplyError::io(&path, e),
    })?;
    let cgs = stealscope_readers::process::parse_cgroup(&text, &path)
        .map_err(|e| ApplyError::Other(e.to_string()))?;
    let m = ctl
        .membership(&cgs)
        .ok_or_else(|| ApplyError::io(&path, "no cpu cgroup line"))?;
    Ok(ctl.group(&m.path))
}

/// Moves every thread of `pid` into `g` (cgroup.procs).
pub fn join(g: &CgroupRef, pid: u32) -> Result<(), ApplyError> {
    write(&format!("{}/cgroup.procs", g.dir), &pid.to_string())
}
