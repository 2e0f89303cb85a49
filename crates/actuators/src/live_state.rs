//! The live value behind each action: read before an action (journaled as
//! `prev`), compared after a crash, restored by rollback and undo.

use crate::error::ApplyError;
use crate::journal::Prev;
use crate::{affinity, autogroup, cgroup, virsh};
use stealscope_placement::input::CpuController;
use stealscope_placement::{Action, Knob};

pub struct Live<'a> {
    pub ctl: Option<&'a CpuController>,
}

fn no_ctl() -> ApplyError {
    ApplyError::Refused("no cpu cgroup controller is mounted".into())
}

/// virsh acts on a domain by name: only while the process planned for runs,
/// so a domain destroyed (or re-created under the same name) since the plan
/// is left alone.
fn domain_runs(via: &Knob, pid: u32) -> Result<(), ApplyError> {
    match via {
        Knob::Libvirt { domain } if !affinity::belongs(pid, pid) => Err(ApplyError::Gone {
            what: format!("domain {domain} (pid {pid})"),
        }),
        _ => Ok(()),
    }
}

/// What the kernel shows after virsh returned: libvirt's word is taken only
/// when the thread or group really changed.
fn check_after_virsh(a: &Action, found: Prev, want: &Prev) -> Result<(), ApplyError> {
    if &found == want {
        return Ok(());
    }
    Err(ApplyError::Other(format!(
        "{a}: virsh succeeded but the kernel shows {found:?}, not {want:?}"
    )))
}

impl Live<'_> {
    /// The current value of what `a` sets.
    pub fn read(&self, a: &Action) -> Result<Prev, ApplyError> {
        Ok(match a {
            Action::Affinity { pid, tid, via, .. } => {
                domain_runs(via, *pid)?;
                if !affinity::belongs(*pid, *tid) {
                    return Err(ApplyError::Gone {
                        what: format!("thread {tid} of process {pid}"),
                    });
                }
                Prev::Affinity {
                    cpus: affinity::get(*tid)?,
                }
            }
            Action::CpuWeight {
                group, pid, via, ..
            } => {
                domain_runs(via, *pid)?;
                Prev::Weight {
                    value: cgroup::weight(group)?,
                }
            }
            Action::JoinGroup { pid, .. } => Prev::Group {
                group: cgroup::group_of(*pid, self.ctl.ok_or_else(no_ctl)?)?,
            },
            Action::AutogroupNice { pid, autogroup, .. } => Prev::Nice {
                value: autogroup::nice(*pid, *autogroup)?,
            },
            Action::MigrateMemory { pid, .. } => {
                let path = format!("/proc/{pid}/numa_maps");
                let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => ApplyError::Gone {
                        what: format!("process {pid}"),
                    },
                    _ => ApplyError::io(&path, e),
                })?;
                Prev::Memory {
                    by_node: stealscope_readers::numa::parse_numa_maps(&text),
                }
            }
        })
    }

    /// What `a` would leave behind, in the same terms as `read`.
    pub fn target(a: &Action) -> Option<Prev> {
        match a {
            Action::Affinity { cpus, .. } => Some(Prev::Affinity { cpus: cpus.clone() }),
            Action::CpuWeight { value, .. } => Some(Prev::Weight { value: *value }),
            Action::JoinGroup { group, .. } => Some(Prev::Group {
                group: group.clone(),
            }),
            Action::AutogroupNice { value, .. } => Some(Prev::Nice { value: *value }),
            // A memory move is never "already there" by equality of maps.
            Action::MigrateMemory { .. } => None,
        }
    }

    /// Sets `value` through the action's knob.
    pub fn write(&self, a: &Action, value: &Prev) -> Result<(), ApplyError> {
        match (a, value) {
            (Action::Affinity { pid, tid, vcpu, via, .. }, Prev::Affinity { cpus }) => {
                domain_runs(via, *pid)?;
                if !affinity::belongs(*pid, *tid) {
                    return Err(ApplyError::Gone {
                        what: format!("thread {tid} of process {pid}"),
                    });
                }
                match via {
                    Knob::Libvirt { domain } => {
                        virsh::pin(domain, *vcpu, cpus)?;
                        check_after_virsh(a, self.read(a)?, value)
                    }
                    Knob::Direct => affinity::set(*tid, cpus),
                }
            }
            (Action::CpuWeight { group, pid, via, .. }, Prev::Weight { value: v }) => match via {
                Knob::Libvirt { domain } => {
                    domain_runs(via, *pid)?;
                    // cpu_shares goes unchanged into cpu.shares (v1) or cpu.weight (v2).
                    virsh::set_shares(domain, *v)?;
                    check_after_virsh(a, self.read(a)?, value)
                }
                Knob::Direct => cgroup::set_weight(group, *v),
            },
            (Action::JoinGroup { pid, .. }, Prev::Group { group }) => {
                cgroup::ensure(group)?;
                cgroup::join(group, *pid)
            }
            (
                Action::AutogroupNice {
                    pid, autogroup, ..
                },
                Prev::Nice { value: v },
            ) => autogroup::set_nice(*pid, *autogroup, *v),
            (Action::MigrateMemory { .. }, Prev::Memory { .. }) => Err(ApplyError::Refused(
                "memory is not moved back: that would be another move with its own risk; use `place move-memory`".into(),
            )),
            _ => Err(ApplyError::Other("journal entry does not match its action".into())),
        }
    }
}
