//! The apply engine: checks a batch, then for each action reads the live
//! value, journals it, applies, and journals the outcome. A failure that is
//! not a VM exiting rolls the batch back. The same engine runs undo (the
//! reverse actions of a batch) and crash recovery (settling actions begun
//! and never marked).

use crate::error::ApplyError;
use crate::journal::{self, BatchKind, Outcome, Prev, Record, Writer};
use crate::live_state::Live;
use crate::memory::{self, MoveLimits};
use crate::{affinity, cpuset};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use stealscope_placement::input::CpuController;
use stealscope_placement::{Action, Knob};

/// Env var naming a crash point for tests: `after-journal:N` kills the
/// process with SIGKILL right after the N-th action's `begin` is on disk.
pub const FAILPOINT_ENV: &str = "STEALSCOPE_FAILPOINT";

#[derive(Debug, Clone, Serialize)]
pub struct ActionResult {
    pub action: Action,
    /// done, would_apply, already, gone, failed, rolled_back, skipped
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev: Option<Prev>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub dry_run: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    pub results: Vec<ActionResult>,
    /// Set when the batch failed and was rolled back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub struct Applier<'a> {
    pub journal: PathBuf,
    pub dry_run: bool,
    pub ctl: Option<&'a CpuController>,
    pub limits: MoveLimits,
    pub log: &'a mut dyn FnMut(&str),
}

fn failpoint() -> Option<u32> {
    std::env::var(FAILPOINT_ENV)
        .ok()?
        .strip_prefix("after-journal:")?
        .parse()
        .ok()
}

fn online_cpus() -> Result<BTreeSet<u32>, ApplyError> {
    let p = "/sys/devices/system/cpu/online";
    let t = std::fs::read_to_string(p).map_err(|e| ApplyError::io(p, e))?;
    Ok(stealscope_readers::cpulist::parse(t.trim(), p)
        .map_err(|e| ApplyError::Other(e.to_string()))?
        .into_iter()
        .collect())
}

fn result(
    action: &Action,
    outcome: &'static str,
    prev: Option<Prev>,
    note: Option<String>,
) -> ActionResult {
    ActionResult {
        action: action.clone(),
        outcome,
        prev,
        note,
    }
}

/// Groups a batch creates (the targets of its JoinGroup actions).
fn groups_created(actions: &[Action]) -> BTreeSet<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::JoinGroup { group, .. } => Some(group.dir.as_str()),
            _ => None,
        })
        .collect()
}

impl Applier<'_> {
    fn live(&self) -> Live<'_> {
        Live { ctl: self.ctl }
    }

    /// Refuses a batch that can no longer be right: CPUs gone offline or
    /// groups vanished since the plan was made. Nothing is changed then.
    fn precheck(&self, actions: &[Action]) -> Result<(), ApplyError> {
        let online = online_cpus()?;
        let created = groups_created(actions);
        for a in actions {
            match a {
                Action::Affinity { cpus, pid, via, .. } => {
                    let off: Vec<u32> = cpus
                        .iter()
                        .copied()
                        .filter(|c| !online.contains(c))
                        .collect();
                    if !off.is_empty() {
                        return Err(ApplyError::Refused(format!(
                            "{a}: CPU(s) {} went offline since the plan was made; nothing was changed, plan again",
                            stealscope_readers::cpulist::format(&off)
                        )));
                    }
                    if let (Knob::Libvirt { .. }, Some((dir, allowed))) =
                        (via, cpuset::domain_cpus(*pid)?)
                    {
                        let out = cpuset::outside(cpus, &allowed);
                        if !out.is_empty() {
                            return Err(ApplyError::Refused(format!(
                                "{a}: CPU(s) {} are not in the domain's cpuset {dir} ({}), so libvirt cannot pin there \
                                 (on cgroup v1 a CPU that was offline stays out of every cpuset: write the online CPUs into \
                                 the cpuset.cpus of libvirt's partition, then of the domain); nothing was changed",
                                stealscope_readers::cpulist::format(&out),
                                stealscope_readers::cpulist::format(&allowed)
                            )));
                        }
                    }
                }
                // A group that went with its VM (libvirt removes a destroyed
                // domain's) is not a vanished group: the VM's actions are gone.
                Action::CpuWeight { group, pid, .. }
                    if !created.contains(group.dir.as_str())
                        && !Path::new(&group.dir).is_dir()
                        && affinity::belongs(*pid, *pid) =>
                {
                    return Err(ApplyError::Refused(format!(
                        "{}: the cgroup vanished since the plan was made; nothing was changed, plan again",
                        group.dir
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn perform(&mut self, a: &Action, target: Option<&Prev>) -> Result<Option<String>, ApplyError> {
        match (a, target) {
            (Action::MigrateMemory { pid, to_node, .. }, _) => {
                let log = &mut *self.log;
                let r =
                    memory::move_memory(Path::new("/"), *pid, *to_node, &self.limits, false, log)
                        .map_err(|e| match e {
                        memory::MemoryError::Gone(p) => ApplyError::Gone {
                            what: format!("process {p}"),
                        },
                        e => ApplyError::Other(e.to_string()),
                    })?;
                Ok(Some(format!(
                    "moved {} MiB in {} step(s){}",
                    r.moved_bytes >> 20,
                    r.steps,
                    r.stopped
                        .map(|s| format!("; stopped: {s}"))
                        .unwrap_or_default()
                )))
            }
            (_, Some(t)) => self.live().write(a, t).map(|_| None),
            _ => Err(ApplyError::Other("action without a target value".into())),
        }
    }

    /// Applies `actions` as one batch (or, dry run, reports what would
    /// change): checked, journaled and applied action by action, and rolled
    /// back as a whole when one fails for another reason than its VM exiting.
    pub fn apply(
        &mut self,
        actions: &[Action],
        kind: BatchKind,
        undoes: Option<u64>,
    ) -> Result<ApplyReport, ApplyError> {
        self.precheck(actions)?;
        if self.dry_run {
            return Ok(self.dry_report(actions));
        }
        // No batch for nothing: an empty one would be `undo`'s next target
        // and read as a change in the journal.
        if actions.is_empty() {
            return Ok(ApplyReport {
                dry_run: false,
                batch: None,
                results: Vec::new(),
                error: None,
            });
        }
        let batch = journal::read(&self.journal)?.next_batch();
        let mut w = Writer::open(&self.journal)?;
        w.append(&Record::Batch {
            batch,
            kind,
            undoes,
            t: journal::now(),
        })?;
        let mut run = BatchRun {
            batch,
            w,
            report: ApplyReport {
                dry_run: false,
                batch: Some(batch),
                results: Vec::new(),
                error: None,
            },
            gone: BTreeSet::new(),
            done: Vec::new(),
            seq: 0,
            crash_at: failpoint(),
        };
        let mut failure = None;
        for (i, a) in actions.iter().enumerate() {
            if let Some(e) = self.apply_one(i, a, &mut run)? {
                failure = Some(e);
                break;
            }
        }
        if let Some(e) = failure {
            self.roll_back(actions, &mut run, &e)?;
        }
        run.w.append(&Record::End {
            batch,
            t: journal::now(),
        })?;
        Ok(run.report)
    }

    /// A dry run: what each action would replace, nothing changed.
    fn dry_report(&self, actions: &[Action]) -> ApplyReport {
        let mut report = ApplyReport {
            dry_run: true,
            batch: None,
            results: Vec::new(),
            error: None,
        };
        let created = groups_created(actions);
        for a in actions {
            if let Action::CpuWeight { group, .. } = a {
                if created.contains(group.dir.as_str()) && !Path::new(&group.dir).is_dir() {
                    report.results.push(result(
                        a,
                        "would_apply",
                        None,
                        Some("the group is created by this batch".into()),
                    ));
                    continue;
                }
            }
            report.results.push(match self.live().read(a) {
                Ok(p) if Live::target(a).as_ref() == Some(&p) => {
                    result(a, "already", Some(p), None)
                }
                Ok(p) => result(a, "would_apply", Some(p), None),
                Err(e) if e.is_gone() => result(a, "gone", None, Some(e.to_string())),
                Err(e) => result(a, "failed", None, Some(e.to_string())),
            });
        }
        report
    }

    /// Reads, journals and applies action `i`; Ok(Some(e)) when it failed
    /// in a way that rolls the batch back, Err when the journal failed.
    fn apply_one(
        &mut self,
        i: usize,
        a: &Action,
        run: &mut BatchRun,
    ) -> Result<Option<ApplyError>, ApplyError> {
        if run.gone.contains(&a.pid()) {
            run.report.results.push(result(
                a,
                "gone",
                None,
                Some("its VM is no longer running".into()),
            ));
            return Ok(None);
        }
        let prev = match self.live().read(a) {
            Ok(p) => p,
            Err(e) if e.is_gone() => {
                run.gone.insert(a.pid());
                run.report
                    .results
                    .push(result(a, "gone", None, Some(e.to_string())));
                return Ok(None);
            }
            Err(e) => return Ok(Some(e)),
        };
        let target = Live::target(a);
        if target.as_ref() == Some(&prev) {
            run.report
                .results
                .push(result(a, "already", Some(prev), None));
            return Ok(None);
        }
        run.seq += 1;
        let (batch, seq) = (run.batch, run.seq);
        run.w.append(&Record::Begin {
            batch,
            seq,
            action: a.clone(),
            prev: prev.clone(),
            t: journal::now(),
        })?;
        if run.crash_at == Some(seq) {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
        (self.log)(&format!("apply: {a} ({})", a.reason()));
        let r = self.perform(a, target.as_ref());
        let (outcome, note) = match &r {
            Ok(n) => (Outcome::Done, n.clone()),
            Err(e) if e.is_gone() => {
                run.gone.insert(a.pid());
                (Outcome::Gone, Some(e.to_string()))
            }
            Err(e) => (Outcome::Failed, Some(e.to_string())),
        };
        run.w.append(&Record::Outcome {
            batch,
            seq,
            outcome,
            note: note.clone(),
            t: journal::now(),
        })?;
        match r {
            Ok(_) => {
                run.done.push((seq, i, prev.clone()));
                run.report.results.push(result(a, "done", Some(prev), note));
                Ok(None)
            }
            Err(e) if e.is_gone() => {
                run.report.results.push(result(a, "gone", Some(prev), note));
                Ok(None)
            }
            Err(e) => {
                run.report
                    .results
                    .push(result(a, "failed", Some(prev), note));
                Ok(Some(e))
            }
        }
    }

    /// Nothing half-applied: puts back what the batch changed, newest first.
    fn roll_back(
        &mut self,
        actions: &[Action],
        run: &mut BatchRun,
        e: &ApplyError,
    ) -> Result<(), ApplyError> {
        let mut restored = 0;
        for (seq, i, prev) in run.done.iter().rev() {
            let a = &actions[*i];
            let r = match a {
                Action::MigrateMemory { .. } => {
                    Err(ApplyError::Refused("memory moves stay".into()))
                }
                _ => self.live().write(a, prev),
            };
            let (outcome, note) = match r {
                Ok(()) => {
                    restored += 1;
                    (Outcome::RolledBack, Some(format!("rolled back after: {e}")))
                }
                Err(x) if x.is_gone() => (Outcome::Gone, Some(x.to_string())),
                Err(x) => (Outcome::Done, Some(format!("could not roll back: {x}"))),
            };
            run.w.append(&Record::Outcome {
                batch: run.batch,
                seq: *seq,
                outcome,
                note,
                t: journal::now(),
            })?;
            if let Some(r) = run
                .report
                .results
                .iter_mut()
                .rev()
                .find(|r| &r.action == a && r.outcome == "done")
            {
                if outcome == Outcome::RolledBack {
                    r.outcome = "rolled_back";
                }
            }
        }
        run.report.error = Some(format!(
            "{e}; rolled back {restored} action(s) of this batch"
        ));
        Ok(())
    }
}

/// A batch being applied: its journal, its report so far, the VMs found
/// gone, and the done actions (seq, index, previous value) to roll back.
struct BatchRun {
    batch: u64,
    w: Writer,
    report: ApplyReport,
    gone: BTreeSet<u32>,
    done: Vec<(u32, usize, Prev)>,
    seq: u32,
    crash_at: Option<u32>,
}

/// The actions that reverse a batch's done actions, newest first. Memory
/// moves are left out (moving back is a new move); they come back as notes.
pub fn reverse(batch: &journal::Batch) -> (Vec<Action>, Vec<String>) {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for e in batch
        .entries
        .iter()
        .rev()
        .filter(|e| e.outcome == Some(Outcome::Done))
    {
        let a = e.action.clone();
        let r = match (a, &e.prev) {
            (
                Action::Affinity {
                    vm,
                    pid,
                    tid,
                    vcpu,
                    cpus,
                    via,
                    ..
                },
                Prev::Affinity { cpus: p },
            ) => Action::Affinity {
                vm,
                pid,
                tid,
                vcpu,
                cpus: p.clone(),
                from: cpus,
                via,
                reason: format!("undo of batch {}", batch.id),
            },
            (
                Action::CpuWeight {
                    vm,
                    pid,
                    group,
                    value,
                    via,
                    ..
                },
                Prev::Weight { value: p },
            ) => Action::CpuWeight {
                vm,
                pid,
                group,
                value: *p,
                from: Some(value),
                via,
                reason: format!("undo of batch {}", batch.id),
            },
            (Action::JoinGroup { vm, pid, group, .. }, Prev::Group { group: p }) => {
                Action::JoinGroup {
                    vm,
                    pid,
                    group: p.clone(),
                    from: Some(group),
                    reason: format!("undo of batch {}", batch.id),
                }
            }
            (
                Action::AutogroupNice {
                    vm,
                    pid,
                    autogroup,
                    value,
                    ..
                },
                Prev::Nice { value: p },
            ) => Action::AutogroupNice {
                vm,
                pid,
                autogroup,
                value: *p,
                from: Some(value),
                reason: format!("undo of batch {}", batch.id),
            },
            (a @ Action::MigrateMemory { .. }, _) => {
                notes.push(format!("{a}: memory is left where it is (moving it back is a new move: `place move-memory`)"));
                continue;
            }
            (a, _) => {
                notes.push(format!(
                    "{a}: journal entry does not match its action; skipped"
                ));
                continue;
            }
        };
        out.push(r);
    }
    (out, notes)
}

/// Settles every action a crash left begun but unmarked: found applied →
/// done; found as before → rolled back; anything else → restored to the
/// journaled previous value. Returns one line per settled action.
pub fn recover(
    journal_path: &Path,
    ctl: Option<&CpuController>,
) -> Result<Vec<String>, ApplyError> {
    let h = journal::read(journal_path)?;
    let unsettled = h.unsettled();
    let open: Vec<u64> = h
        .batches
        .iter()
        .filter(|b| !b.ended)
        .map(|b| b.id)
        .collect();
    if unsettled.is_empty() && open.is_empty() {
        return Ok(Vec::new());
    }
    let live = Live { ctl };
    let mut w = Writer::open(journal_path)?;
    let mut lines = Vec::new();
    for (batch, e) in unsettled {
        let a = &e.action;
        let (outcome, note) = match (live.read(a), Live::target(a)) {
            (Err(x), _) if x.is_gone() => (Outcome::Gone, x.to_string()),
            (Err(x), _) => (Outcome::Failed, format!("cannot read the live value: {x}")),
            (Ok(_), None) => (
                Outcome::Done,
                "interrupted memory move: the pages moved so far stay".to_string(),
            ),
            (Ok(now), Some(t)) if now == t => {
                (Outcome::Done, "found applied after a crash".to_string())
            }
            (Ok(now), _) if now == e.prev => (
                Outcome::RolledBack,
                "found not applied after a crash".to_string(),
            ),
            (Ok(_), _) => match live.write(a, &e.prev) {
                Ok(()) => (
                    Outcome::RolledBack,
                    "found half-applied after a crash: restored".to_string(),
                ),
                Err(x) => (
                    Outcome::Failed,
                    format!("found half-applied after a crash, restore failed: {x}"),
                ),
            },
        };
        lines.push(format!(
            "recovered batch {batch} action {}: {a}: {note}",
            e.seq
        ));
        w.append(&Record::Outcome {
            batch,
            seq: e.seq,
            outcome,
            note: Some(note),
            t: journal::now(),
        })?;
    }
    for batch in open {
        w.append(&Record::End {
            batch,
            t: journal::now(),
        })?;
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_plan_writes_no_batch() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("place.journal");
        let mut log = |_: &str| {};
        let mut ap = Applier {
            journal: journal.clone(),
            dry_run: false,
            ctl: None,
            limits: MoveLimits {
                margin_pct: 10.0,
                margin_min_bytes: 0,
                step_bytes: 1 << 20,
                psi_stop: 10.0,
                swap_headroom: 1.0,
            },
            log: &mut log,
        };
        let r = ap.apply(&[], BatchKind::Apply, None).unwrap();
        assert_eq!((r.batch, r.results.len()), (None, 0));
        assert!(!journal.exists(), "an empty batch was journaled");
    }
}
