//! A snapshot that was cut off (a copy or a disk that stopped): what it
//! still holds, checked against its manifest (`manifest.json`, every other
//! file's size in the order written, right after `meta.json`), and the
//! sides rebuilt from what survived, so that a partial snapshot reports
//! what it holds up to the cut and never a zero for what it lost.
//!
//! The files are written meta.json, manifest.json, samples.jsonl,
//! cpuid.json, counters.json, t0/..., t1/...: a cut loses the end first. A
//! side that is not whole cannot be used (a VM's thread times at one end
//! and not the other would read as no run and no wait), so then both sides
//! are rebuilt from the /proc/stat samples that survived: the cpu rows and
//! the uptime of the first and last sample, the rest of t0 when t0 is
//! whole, without any process or live answer (the VMs' figures need both
//! ends).

use super::RawSample;
use crate::damage::{Damage, FileKind};
use crate::source::MemFs;
use serde::{Deserialize, Serialize};

pub const MANIFEST_FILE: &str = "manifest.json";

/// Every file of the snapshot but meta.json and the manifest, with its size.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub files: Vec<(String, u64)>,
}

/// What the reader found missing or short.
#[derive(Debug, Default)]
pub struct Loss {
    /// The archive's own error, when it ended inside the stream.
    pub archive: Option<String>,
    /// Files the manifest lists that are missing or shorter: (name, want, got).
    pub files: Vec<(String, u64, u64)>,
    pub bytes_expected: Option<u64>,
    /// The manifest itself is cut short: nothing after it can be trusted.
    pub manifest_cut: bool,
}

impl Loss {
    /// Files short or missing against the manifest, given what was loaded.
    pub fn against(manifest: &Manifest, size_of: impl Fn(&str) -> Option<u64>) -> Loss {
        let files = manifest
            .files
            .iter()
            .filter_map(|(name, want)| {
                let got = size_of(name).unwrap_or(0);
                (got < *want).then(|| (name.clone(), *want, got))
            })
            .collect();
        Loss {
            archive: None,
            files,
            bytes_expected: Some(manifest.files.iter().map(|(_, n)| n).sum()),
            manifest_cut: false,
        }
    }

    /// A manifest that does not parse: cut short with everything after it.
    pub fn manifest_cut() -> Loss {
        Loss {
            manifest_cut: true,
            ..Loss::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.archive.is_none() && self.files.is_empty() && !self.manifest_cut
    }

    /// Whether every file of `side` ("t0", "t1") is whole.
    pub fn side_whole(&self, side: &str) -> bool {
        let prefix = format!("{side}/");
        !self.files.iter().any(|(n, _, _)| n.starts_with(&prefix))
    }

    pub fn lost(&self, name: &str) -> bool {
        self.files.iter().any(|(n, _, _)| n == name)
    }

    fn why(&self) -> String {
        let mut parts = Vec::new();
        if self.manifest_cut {
            parts.push(format!(
                "{MANIFEST_FILE} is cut short, and what follows it with it"
            ));
        }
        if let Some((first, _, got)) = self.files.first() {
            let short = if *got > 0 { "cut short" } else { "missing" };
            parts.push(format!(
                "{} of its files missing or cut short, from {first} ({short})",
                self.files.len()
            ));
        }
        if let Some(a) = &self.archive {
            parts.push(format!("the archive ends early ({a})"));
        }
        parts.join("; ")
    }

    fn bytes_lost(&self) -> Option<u64> {
        (!self.files.is_empty()).then(|| self.files.iter().map(|(_, w, g)| w - g).sum())
    }
}

/// The samples of a samples.jsonl that may end inside a line: every whole
/// line that parses, up to the first that does not.
pub fn whole_samples(bytes: &[u8]) -> Vec<RawSample> {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map_while(|l| serde_json::from_str::<RawSample>(l).ok())
        .collect()
}

/// A side rebuilt from one sample: `base`'s files without any process or
/// live answer, with the sample's cpu rows and its time as the uptime.
fn side_from(base: &MemFs, s: &RawSample, name: &str) -> MemFs {
    let mut fs = MemFs::new(name);
    for (path, data) in &base.files {
        let process = path
            .strip_prefix("/proc/")
            .and_then(|r| r.split('/').next())
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if !process && !path.starts_with("/stealscope/") {
            fs.insert(path, data);
        }
    }
    let rest: String = base
        .files
        .get("/proc/stat")
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
        .split_inclusive('\n')
        .skip_while(|l| l.starts_with("cpu"))
        .collect();
    let rows = if s.stat.ends_with('\n') {
        s.stat.clone()
    } else {
        format!("{}\n", s.stat)
    };
    fs.insert("/proc/stat", format!("{rows}{rest}"));
    // CLOCK_MONOTONIC is the uptime's clock (less suspend): a difference of
    // two is the interval.
    fs.insert("/proc/uptime", format!("{:.2} 0.00\n", s.t_ns as f64 / 1e9));
    fs
}

/// What a cut snapshot still gives: both sides (rebuilt when either is not
/// whole), and the damage the report names.
pub struct Rebuilt {
    pub t0: MemFs,
    pub t1: MemFs,
    pub damage: Damage,
}

/// Rebuilds the sides of a cut snapshot; Err says why nothing is left to
/// analyse.
pub fn rebuild(
    loss: &Loss,
    file: FileKind,
    interval_s: f64,
    (t0, t1): (MemFs, MemFs),
    samples: &[RawSample],
) -> Result<Rebuilt, String> {
    let mut consequences = Vec::new();
    // With a manifest, the files say what is whole; without one, an
    // archive that ended early may have lost any of them.
    let sides_whole = !loss.manifest_cut
        && loss.side_whole("t0")
        && loss.side_whole("t1")
        && (loss.bytes_expected.is_some() || loss.archive.is_none());
    let (t0, t1, cut_at_s) = if sides_whole && t1.files.contains_key("/proc/stat") {
        (t0, t1, Some(interval_s))
    } else {
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            return Err(format!(
                "cut off ({}): its end side and its sample series are lost: nothing to analyse",
                loss.why()
            ));
        };
        if samples.len() < 2 || last.t_ns <= first.t_ns {
            return Err(format!(
                "cut off ({}): its end side is lost and fewer than two samples survived: nothing to analyse",
                loss.why()
            ));
        }
        let base = if loss.side_whole("t0") && t0.files.contains_key("/proc/stat") {
            t0
        } else {
            MemFs::new("t0")
        };
        consequences.push(format!(
            "the end side is lost: both ends are the /proc/stat samples that survived (+0.0 to +{:.1} s); the VMs' and processes' figures need both ends and are left out",
            (last.t_ns - first.t_ns) as f64 / 1e9
        ));
        let t0 = side_from(&base, first, &t0_name(&base));
        let t1 = side_from(&base, last, "t1");
        (t0, t1, Some((last.t_ns - first.t_ns) as f64 / 1e9))
    };
    for f in ["cpuid.json", "counters.json"] {
        if loss.lost(f) {
            consequences.push(format!("{f} is lost: left out"));
        }
    }
    Ok(Rebuilt {
        t0,
        t1,
        damage: Damage {
            file,
            cut_at_s,
            intended_s: Some(interval_s),
            bytes_lost: loss.bytes_lost(),
            bytes_expected: loss.bytes_expected,
            why: loss.why(),
            consequences,
        },
    })
}

fn t0_name(base: &MemFs) -> String {
    if base.name.is_empty() {
        "t0".into()
    } else {
        base.name.clone()
    }
}
