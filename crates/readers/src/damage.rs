//! What a snapshot or recording file lost: cut off (a copy, a disk or a
//! recorder that stopped) or damaged. The readers keep what comes before
//! the damage and say so here; the report puts this in the verdict's place
//! so that figures of a partial file are never read as the whole.

use serde::{Deserialize, Serialize};

/// Which kind of file was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    Recording,
    /// A snapshot `.tar.gz`.
    SnapshotArchive,
    /// A snapshot directory.
    SnapshotDirectory,
}

impl FileKind {
    pub fn noun(self) -> &'static str {
        match self {
            FileKind::Recording => "recording",
            FileKind::SnapshotArchive => "snapshot archive",
            FileKind::SnapshotDirectory => "snapshot directory",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Damage {
    pub file: FileKind,
    /// Seconds from the start of the capture to the last moment the intact
    /// part covers (None: nothing after the start survived).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut_at_s: Option<f64>,
    /// How long the capture was meant to be (a recording's `--duration`,
    /// a snapshot's interval), when the file says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_s: Option<f64>,
    /// Bytes after the last good one that could not be used, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_lost: Option<u64>,
    /// Bytes the file should hold, when known (a snapshot's manifest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_expected: Option<u64>,
    /// Where and how it ends, in a few words.
    pub why: String,
    /// What the report therefore leaves out or takes from elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consequences: Vec<String>,
}

impl Damage {
    /// One sentence for the verdict's place: what is cut and how much is missing.
    pub fn headline(&self) -> String {
        let at = match self.cut_at_s {
            Some(t) => format!("cut off at +{t:.1} s"),
            None => "cut off before its first interval ended".to_string(),
        };
        let mut missing = Vec::new();
        if let (Some(cut), Some(want)) = (self.cut_at_s, self.intended_s) {
            if want > cut {
                missing.push(format!("{:.1} s of the {want:.1} s asked", want - cut));
            }
        }
        match (self.bytes_lost, self.bytes_expected) {
            (Some(lost), Some(all)) if lost > 0 => {
                missing.push(format!("{lost} of {all} bytes"));
            }
            (Some(lost), None) if lost > 0 => missing.push(format!("{lost} bytes after it")),
            _ => {}
        }
        let missing = if missing.is_empty() {
            String::new()
        } else {
            format!(" ({} missing)", missing.join(", "))
        };
        format!(
            "The {} is {at}{missing}: {}; figures cover only the part before the cut",
            self.file.noun(),
            self.why
        )
    }
}
