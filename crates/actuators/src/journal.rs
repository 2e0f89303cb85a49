//! The placement journal: JSON lines, each fsync'ed before the change it
//! announces is made. A batch (one `apply` or `undo`) opens with `batch`,
//! every action has `begin` (the action and the live value it replaces)
//! and then exactly one of `done`, `failed`, `gone` or `rolled_back`; the
//! batch closes with `end`. A `begin` without its outcome is what a crash
//! leaves: recovery settles it from the live system.

use crate::error::ApplyError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use stealscope_placement::{Action, CgroupRef};

/// The live value an action replaced: what undo and rollback restore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Prev {
    Affinity {
        cpus: Vec<u32>,
    },
    Weight {
        value: u64,
    },
    Group {
        group: CgroupRef,
    },
    /// An autogroup's nice.
    Nice {
        value: i32,
    },
    Memory {
        by_node: BTreeMap<u32, u64>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchKind {
    Apply,
    Undo,
    Recover,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Done,
    Failed,
    Gone,
    RolledBack,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Batch {
        batch: u64,
        kind: BatchKind,
        /// For undo: the batch it reverses.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        undoes: Option<u64>,
        t: f64,
    },
    Begin {
        batch: u64,
        seq: u32,
        action: Action,
        prev: Prev,
        t: f64,
    },
    Outcome {
        batch: u64,
        seq: u32,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        t: f64,
    },
    End {
        batch: u64,
        t: f64,
    },
}

pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One action of a batch as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub seq: u32,
    pub action: Action,
    pub prev: Prev,
    pub begun_at: f64,
    pub outcome: Option<Outcome>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub id: u64,
    pub kind: BatchKind,
    pub undoes: Option<u64>,
    pub entries: Vec<Entry>,
    pub ended: bool,
}

#[derive(Debug, Default)]
pub struct JournalState {
    pub batches: Vec<Batch>,
    /// A torn last line (a crash mid-write) is skipped and reported here.
    pub torn_tail: bool,
}

impl JournalState {
    /// Actions begun and never settled (a crash between journal and apply).
    pub fn unsettled(&self) -> Vec<(u64, &Entry)> {
        self.batches
            .iter()
            .flat_map(|b| {
                b.entries
                    .iter()
                    .filter(|e| e.outcome.is_none())
                    .map(move |e| (b.id, e))
            })
            .collect()
    }

    /// The last apply batch not yet undone.
    pub fn last_undoable(&self) -> Option<&Batch> {
        let undone: Vec<u64> = self.batches.iter().filter_map(|b| b.undoes).collect();
        self.batches.iter().rev().find(|b| {
            b.kind == BatchKind::Apply
                && !undone.contains(&b.id)
                && b.entries.iter().any(|e| e.outcome == Some(Outcome::Done))
        })
    }

    pub fn next_batch(&self) -> u64 {
        self.batches.iter().map(|b| b.id + 1).max().unwrap_or(1)
    }

    /// When each VM (by pid) last had an action done: for the planner's
    /// minimum interval between moves after a restart.
    pub fn last_change(&self) -> BTreeMap<u32, f64> {
        let mut m = BTreeMap::new();
        for b in &self.batches {
            for e in &b.entries {
                if e.outcome == Some(Outcome::Done) {
                    let t = m.entry(e.action.pid()).or_insert(e.begun_at);
                    *t = t.max(e.begun_at);
                }
            }
        }
        m
    }
}

/// What reading the journal takes, for the permission error.
pub const READ_NEED: &str = "reading the placement journal takes root (or read access to it)";
/// What writing it takes.
pub const WRITE_NEED: &str =
    "changing the placement (--yes) journals every change first, which takes root (or write access to the journal)";

pub fn read(path: &Path) -> Result<JournalState, ApplyError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(JournalState::default()),
        Err(e) => return Err(ApplyError::io_or_denied(path, e, READ_NEED)),
    };
    let mut h = JournalState::default();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: Record = match serde_json::from_str(line) {
            Ok(r) => r,
            // Only the very last line can be torn by a crash (each record
            // is one write); anything else is a damaged journal.
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {
                h.torn_tail = true;
                break;
            }
            Err(e) => {
                return Err(ApplyError::io(
                    path.display().to_string(),
                    format!("line {}: not a journal record ({e})", i + 1),
                ))
            }
        };
        let bad = |msg: &str| {
            ApplyError::io(path.display().to_string(), format!("line {}: {msg}", i + 1))
        };
        match rec {
            Record::Batch {
                batch,
                kind,
                undoes,
                ..
            } => h.batches.push(Batch {
                id: batch,
                kind,
                undoes,
                entries: Vec::new(),
                ended: false,
            }),
            Record::Begin {
                batch,
                seq,
                action,
                prev,
                t,
            } => {
                let b = h
                    .batches
                    .iter_mut()
                    .find(|b| b.id == batch)
                    .ok_or_else(|| bad("action of an unknown batch"))?;
                b.entries.push(Entry {
                    seq,
                    action,
                    prev,
                    begun_at: t,
                    outcome: None,
                });
            }
            Record::Outcome {
                batch,
                seq,
                outcome,
                ..
            } => {
                let e = h
                    .batches
                    .iter_mut()
                    .find(|b| b.id == batch)
                    .and_then(|b| b.entries.iter_mut().find(|e| e.seq == seq))
                    .ok_or_else(|| bad("outcome of an unknown action"))?;
                e.outcome = Some(outcome);
            }
            Record::End { batch, .. } => {
                if let Some(b) = h.batches.iter_mut().find(|b| b.id == batch) {
                    b.ended = true;
                }
            }
        }
    }
    Ok(h)
}

/// Appends records, each flushed to disk before `append` returns.
pub struct Writer {
    file: File,
    path: PathBuf,
}

impl Writer {
    pub fn open(path: &Path) -> Result<Writer, ApplyError> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| ApplyError::io_or_denied(dir, e, WRITE_NEED))?;
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| ApplyError::io_or_denied(path, e, WRITE_NEED))?;
        // A torn last line is a record a crash cut short: the change it
        // announced was never made (records precede changes), so drop it.
        let text =
            std::fs::read(path).map_err(|e| ApplyError::io(path.display().to_string(), e))?;
        if !text.is_empty() && !text.ends_with(b"\n") {
            let keep = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            file.set_len(keep as u64)
                .and_then(|_| file.sync_data())
                .map_err(|e| ApplyError::io(path.display().to_string(), e))?;
        }
        Ok(Writer {
            file,
            path: path.to_path_buf(),
        })
    }

    fn raw(&mut self, bytes: &[u8]) -> Result<(), ApplyError> {
        let p = self.path.display().to_string();
        self.file
            .write_all(bytes)
            .map_err(|e| ApplyError::io(&p, e))?;
        self.file.sync_data().map_err(|e| ApplyError::io(&p, e))
    }

    pub fn append(&mut self, r: &Record) -> Result<(), ApplyError> {
        let mut line = serde_json::to_vec(r).map_err(|e| ApplyError::Other(e.to_string()))?;
        line.push(b'\n');
        self.raw(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stealscope_placement::Knob;

    fn affinity(tid: u32) -> Action {
        Action::Affinity {
            vm: "vm".into(),
            pid: 1,
            tid,
            vcpu: Some(0),
            cpus: vec![1],
            from: vec![0, 1],
            via: Knob::Direct,
            reason: "r".into(),
        }
    }

    fn write_batch(w: &mut Writer, batch: u64, settle: bool) {
        w.append(&Record::Batch {
            batch,
            kind: BatchKind::Apply,
            undoes: None,
            t: 1.0,
        })
        .unwrap();
        w.append(&Record::Begin {
            batch,
            seq: 1,
            action: affinity(7),
            prev: Prev::Affinity { cpus: vec![0, 1] },
            t: 2.0,
        })
        .unwrap();
        if settle {
            w.append(&Record::Outcome {
                batch,
                seq: 1,
                outcome: Outcome::Done,
                note: None,
                t: 3.0,
            })
            .unwrap();
            w.append(&Record::End { batch, t: 4.0 }).unwrap();
        }
    }

    #[test]
    fn round_trip_unsettled_and_undoable() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/j");
        let mut w = Writer::open(&p).unwrap();
        write_batch(&mut w, 1, true);
        write_batch(&mut w, 2, false);
        let h = read(&p).unwrap();
        assert_eq!(h.batches.len(), 2);
        assert_eq!(h.unsettled().len(), 1);
        assert_eq!(h.unsettled()[0].0, 2);
        assert_eq!(h.last_undoable().map(|b| b.id), Some(1));
        assert_eq!(h.next_batch(), 3);
        assert_eq!(h.last_change().get(&1), Some(&2.0));
        assert!(!h.torn_tail);
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_mended_garbage_elsewhere_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        let mut w = Writer::open(&p).unwrap();
        write_batch(&mut w, 1, true);
        drop(w);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"type\":\"batch\",\"bat").unwrap();
        let h = read(&p).unwrap();
        assert!(h.torn_tail);
        assert_eq!(h.batches.len(), 1);
        // Reopening drops the torn record; the journal reads whole again.
        let mut w = Writer::open(&p).unwrap();
        write_batch(&mut w, 2, true);
        let h = read(&p).unwrap();
        assert!(!h.torn_tail);
        assert_eq!(
            h.batches.iter().map(|b| b.id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        // A damaged line anywhere else is an error naming file and line.
        let text =
            std::fs::read_to_string(&p)
                .unwrap()
                .replacen("\"type\":\"end\"", "\"type\":\"?\"", 1);
        std::fs::write(&p, text).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains(&p.display().to_string()) && e.contains("line 4: not a journal record"),
            "{e}"
        );
    }

    #[test]
    fn records_out_of_place_are_errors() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j");
        std::fs::write(
            &p,
            "{\"type\":\"outcome\",\"batch\":9,\"seq\":1,\"outcome\":\"done\",\"t\":0}\n",
        )
        .unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("line 1: outcome of an unknown action"), "{e}");
        assert!(read(&d.path().join("missing")).unwrap().batches.is_empty());
    }
}
