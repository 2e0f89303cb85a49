//! Snapshot format `stealscope-snapshot/1` (docs/snapshot.md): meta.json, t0/ and t1/
//! holding files under their absolute paths, optional samples.jsonl,
//! cpuid.json (raw CPUID registers) and counters.json (per-CPU hardware
//! counter reads aligned with the samples). Read
//! from a directory or a .tar.gz into memory so both behave the same.

use crate::cpuid::CpuidDump;
use crate::damage::FileKind;
use crate::error::{ReadError, Result};
use crate::perf::CounterCapture;
pub mod cut;

use crate::source::MemFs;
use cut::{rebuild, whole_samples, Loss, Manifest, MANIFEST_FILE};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Component, Path};

pub const FORMAT: &str = "stealscope-snapshot/1";
/// Bounds on what we load, so a hostile archive cannot exhaust memory.
const MAX_TOTAL_BYTES: u64 = 1 << 30;
const MAX_FILES: usize = 200_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub format: String,
    pub interval_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_unix_s: Option<f64>,
    /// USER_HZ of the machine (sysconf(_SC_CLK_TCK)); 100 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clk_tck: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stealscope_version: Option<String>,
    /// Rate of samples.jsonl, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_hz: Option<f64>,
}

/// One line of samples.jsonl: CLOCK_MONOTONIC time and the cpu rows of
/// /proc/stat verbatim (parsed by the same code as t0/t1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawSample {
    pub t_ns: u64,
    pub stat: String,
}

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub meta: Meta,
    pub t0: MemFs,
    pub t1: MemFs,
    pub samples: Vec<RawSample>,
    /// What is not a file: CPUID registers and perf counter reads.
    pub hardware: Hardware,
    /// The file was cut off or damaged: what it lost (None: whole).
    pub damage: Option<crate::damage::Damage>,
}

pub const CPUID_FILE: &str = "cpuid.json";
pub const COUNTERS_FILE: &str = "counters.json";

/// Optional hardware evidence; None when the capture did not take it (a
/// snapshot from an older stealscope, or a capture under --root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hardware {
    pub cpuid: Option<CpuidDump>,
    pub counters: Option<CounterCapture>,
}

fn parse_meta(bytes: &[u8], path: &str) -> Result<Meta> {
    let meta: Meta = serde_json::from_slice(bytes)
        .map_err(|e| ReadError::parse(path, format!("not valid snapshot metadata: {e}")))?;
    if meta.format != FORMAT {
        return Err(ReadError::parse(
            path,
            format!(
                "format {:?} is not supported (this build reads {FORMAT})",
                meta.format
            ),
        ));
    }
    if !(meta.interval_s.is_finite() && meta.interval_s > 0.0) {
        return Err(ReadError::parse(
            path,
            format!("interval_s {} is not a positive number", meta.interval_s),
        ));
    }
    if meta.clk_tck == Some(0) {
        return Err(ReadError::parse(path, "clk_tck is 0"));
    }
    Ok(meta)
}

fn parse_samples(bytes: &[u8], path: &str) -> Result<Vec<RawSample>> {
    let text = std::str::from_utf8(bytes).map_err(|_| ReadError::parse(path, "not UTF-8 text"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let s: RawSample = serde_json::from_str(line)
            .map_err(|e| ReadError::parse(path, format!("line {}: {e}", i + 1)))?;
        out.push(s);
    }
    Ok(out)
}

/// Splits "t0/proc/stat" into the side and the absolute path "/proc/stat".
fn side_path(rel: &str) -> Option<(&str, String)> {
    let (side, rest) = rel.split_once('/')?;
    (matches!(side, "t0" | "t1") && !rest.is_empty()).then(|| (side, format!("/{rest}")))
}

#[derive(Default)]
struct Loader {
    meta: Option<Vec<u8>>,
    manifest: Option<Vec<u8>>,
    /// Every file's size as loaded, by its name in the snapshot.
    sizes: std::collections::BTreeMap<String, u64>,
    /// The archive ended inside its stream (a cut-off .tar.gz).
    archive_cut: Option<String>,
    /// The entry the archive ended in: (name, size its header gives, got).
    /// A side holding it is not whole, with or without a manifest.
    short_entry: Option<(String, u64, u64)>,
    samples: Option<Vec<u8>>,
    cpuid: Option<Vec<u8>>,
    counters: Option<Vec<u8>>,
    t0: MemFs,
    t1: MemFs,
    bytes: u64,
    files: usize,
}

impl Loader {
    fn add(&mut self, rel: &str, data: Vec<u8>, origin: &str) -> Result<()> {
        self.bytes += data.len() as u64;
        self.files += 1;
        if self.bytes > MAX_TOTAL_BYTES || self.files > MAX_FILES {
            return Err(ReadError::parse(origin, "snapshot too large"));
        }
        self.sizes.insert(rel.to_string(), data.len() as u64);
        match rel {
            "meta.json" => self.meta = Some(data),
            MANIFEST_FILE => self.manifest = Some(data),
            "samples.jsonl" => self.samples = Some(data),
            CPUID_FILE => self.cpuid = Some(data),
            COUNTERS_FILE => self.counters = Some(data),
            _ => {
                if let Some((side, abs)) = side_path(rel) {
                    if side == "t0" {
                        self.t0.insert(&abs, data);
                    } else {
                        self.t1.insert(&abs, data);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(self, origin: &str, file: FileKind) -> Result<Snapshot> {
        let meta_path = format!("{origin}/meta.json");
        let meta_bytes = self.meta.as_deref().ok_or_else(|| {
            let why = match &self.archive_cut {
                Some(e) => format!("missing: the archive ends before it ({e})"),
                None => "missing".to_string(),
            };
            ReadError::parse(&meta_path, why)
        })?;
        // meta.json comes first: cut inside it, nothing follows it.
        let cut_in_meta = self.archive_cut.is_some() || self.sizes.len() == 1;
        let meta = parse_meta(meta_bytes, &meta_path).map_err(|e| match e {
            ReadError::Parse { path, msg } if cut_in_meta => ReadError::parse(
                &path,
                format!("incomplete: the snapshot is cut off inside it ({msg})"),
            ),
            e => e,
        })?;
        let loss = self.loss();
        if loss.is_empty() {
            return self.whole(origin, meta);
        }
        self.cut(origin, meta, file, loss)
    }

    /// What the manifest lists that did not arrive whole, and where the
    /// archive ended early (a snapshot from before manifests: the archive's
    /// own error only).
    fn loss(&self) -> Loss {
        let mut loss = match &self.manifest {
            // Written in one go right after meta.json: one that does not
            // parse was cut (an error naming it when nothing else is left).
            Some(b) => match serde_json::from_slice::<Manifest>(b) {
                Ok(m) => Loss::against(&m, |n| self.sizes.get(n).copied()),
                Err(_) => Loss::manifest_cut(),
            },
            None => Loss::default(),
        };
        loss.archive = self.archive_cut.clone();
        if let Some(short) = &self.short_entry {
            if !loss.lost(&short.0) {
                loss.files.push(short.clone());
            }
        }
        loss
    }

    fn whole(self, origin: &str, meta: Meta) -> Result<Snapshot> {
        let samples = match self.samples {
            Some(b) => parse_samples(&b, &format!("{origin}/samples.jsonl"))?,
            None => Vec::new(),
        };
        let hardware = Hardware {
            cpuid: parse_json(self.cpuid.as_deref(), &format!("{origin}/{CPUID_FILE}"))?,
            counters: parse_json(
                self.counters.as_deref(),
                &format!("{origin}/{COUNTERS_FILE}"),
            )?,
        };
        let mut t0 = self.t0;
        let mut t1 = self.t1;
        t0.name = format!("{origin}/t0");
        t1.name = format!("{origin}/t1");
        Ok(Snapshot {
            meta,
            t0,
            t1,
            samples,
            hardware,
            damage: None,
        })
    }

    /// A cut snapshot: the whole samples and files that arrived, sides
    /// rebuilt when one is not whole ([`cut`]).
    fn cut(self, origin: &str, meta: Meta, file: FileKind, loss: Loss) -> Result<Snapshot> {
        let samples = self
            .samples
            .as_deref()
            .map(whole_samples)
            .unwrap_or_default();
        // A hardware file that is cut does not parse: left out, and said.
        let hardware = Hardware {
            cpuid: parse_json(self.cpuid.as_deref(), CPUID_FILE).ok().flatten(),
            counters: parse_json(self.counters.as_deref(), COUNTERS_FILE)
                .ok()
                .flatten(),
        };
        let r = rebuild(&loss, file, meta.interval_s, (self.t0, self.t1), &samples)
            .map_err(|why| ReadError::parse(origin, why))?;
        let (mut t0, mut t1) = (r.t0, r.t1);
        t0.name = format!("{origin}/t0");
        t1.name = format!("{origin}/t1");
        Ok(Snapshot {
            meta,
            t0,
            t1,
            samples,
            hardware,
            damage: Some(r.damage),
        })
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(
    bytes: Option<&[u8]>,
    path: &str,
) -> Result<Option<T>> {
    bytes
        .map(|b| {
            serde_json::from_slice(b).map_err(|e| ReadError::parse(path, format!("not valid: {e}")))
        })
        .transpose()
}

fn load_dir(dir: &Path, rel: &str, loader: &mut Loader, origin: &str) -> Result<()> {
    let full = dir.join(rel);
    let rd = std::fs::read_dir(&full).map_err(|e| ReadError::io(&full.display().to_string(), e))?;
    for entry in rd {
        let entry = entry.map_err(|e| ReadError::io(&full.display().to_string(), e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry.file_type().map_err(|e| ReadError::io(&child, e))?;
        if ft.is_dir() {
            load_dir(dir, &child, loader, origin)?;
        } else if ft.is_file() {
            let p = dir.join(&child);
            let data = std::fs::read(&p).map_err(|e| ReadError::io(&p.display().to_string(), e))?;
            loader.add(&child, data, origin)?;
        } // symlinks and devices are never part of a snapshot: ignored
    }
    Ok(())
}

fn load_tar_gz(path: &Path, loader: &mut Loader, origin: &str) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| ReadError::io(origin, e))?;
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let bad = |e: std::io::Error| ReadError::parse(origin, format!("not a readable .tar.gz: {e}"));
    for entry in ar.entries().map_err(bad)? {
        // An archive that ends inside its stream was cut off (a copy or a
        // disk that stopped): what came before is kept, the loss is said.
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                loader.archive_cut = Some(e.to_string());
                break;
            }
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let p = entry.path().map_err(bad)?.into_owned();
        // Accept both "t0/..." and "<snapdir>/t0/..." layouts; reject "..".
        let comps: Vec<String> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        if p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(ReadError::parse(
                origin,
                format!("archive entry {} escapes the snapshot", p.display()),
            ));
        }
        let start = comps.iter().position(|c| {
            matches!(
                c.as_str(),
                "t0" | "t1"
                    | "meta.json"
                    | MANIFEST_FILE
                    | "samples.jsonl"
                    | CPUID_FILE
                    | COUNTERS_FILE
            )
        });
        let Some(start) = start else { continue };
        let rel = comps[start..].join("/");
        let want = entry.header().size().unwrap_or(0);
        let mut data = Vec::new();
        let read = entry.take(MAX_TOTAL_BYTES + 1).read_to_end(&mut data);
        // A stream that ends cleanly inside an entry reads short, no error.
        let cut = match read {
            Err(e) => Some(e.to_string()),
            Ok(got) if (got as u64) < want => Some(format!("{got} of its {want} bytes")),
            Ok(_) => None,
        };
        if let Some(e) = cut {
            loader.archive_cut = Some(format!("inside {rel}: {e}"));
            loader.short_entry = Some((rel.clone(), want, data.len() as u64));
            // The part of the entry that arrived counts against the manifest.
            loader.add(&rel, data, origin)?;
            break;
        }
        loader.add(&rel, data, origin)?;
    }
    // The stream must end where gzip says (its trailer holds the length
    // and CRC): a cut after the last file still lost something.
    if loader.archive_cut.is_none() {
        if let Err(e) = std::io::copy(&mut ar.into_inner(), &mut std::io::sink()) {
            loader.archive_cut = Some(format!("after its last file: {e}"));
        }
    }
    Ok(())
}

pub fn is_tar_gz(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s.ends_with(".tar.gz") || s.ends_with(".tgz")
}

/// Opens a snapshot directory or .tar.gz.
pub fn open(path: &Path) -> Result<Snapshot> {
    let origin = path.display().to_string();
    let mut loader = Loader::default();
    let md = std::fs::metadata(path).map_err(|e| ReadError::io(&origin, e))?;
    let kind = if md.is_dir() {
        load_dir(path, "", &mut loader, &origin)?;
        FileKind::SnapshotDirectory
    } else if is_tar_gz(path) {
        load_tar_gz(path, &mut loader, &origin)?;
        FileKind::SnapshotArchive
    } else {
        return Err(ReadError::parse(
            &origin,
            "not a snapshot directory or .tar.gz",
        ));
    };
    loader.finish(&origin, kind)
}

fn rel_files(s: &Snapshot) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = vec![(
        "meta.json".to_string(),
        serde_json::to_vec_pretty(&s.meta).map_err(|e| ReadError::parse("meta.json", e))?,
    )];
    let manifest_at = files.len();
    if !s.samples.is_empty() {
        let mut buf = Vec::new();
        for smp in &s.samples {
            serde_json::to_writer(&mut buf, smp)
                .map_err(|e| ReadError::parse("samples.jsonl", e))?;
            buf.push(b'\n');
        }
        files.push(("samples.jsonl".to_string(), buf));
    }
    let json = |name: &str, v: serde_json::Result<Vec<u8>>| {
        v.map(|b| (name.to_string(), b))
            .map_err(|e| ReadError::parse(name, e))
    };
    if let Some(c) = &s.hardware.cpuid {
        files.push(json(CPUID_FILE, serde_json::to_vec_pretty(c))?);
    }
    if let Some(c) = &s.hardware.counters {
        files.push(json(COUNTERS_FILE, serde_json::to_vec(c))?);
    }
    for (side, fs) in [("t0", &s.t0), ("t1", &s.t1)] {
        for (abs, data) in &fs.files {
            files.push((format!("{side}{abs}"), data.clone()));
        }
    }
    // Right after meta.json, so that a cut file still says what it lost.
    let manifest = Manifest {
        files: files[manifest_at..]
            .iter()
            .map(|(n, d)| (n.clone(), d.len() as u64))
            .collect(),
    };
    files.insert(
        manifest_at,
        json(MANIFEST_FILE, serde_json::to_vec(&manifest))?,
    );
    Ok(files)
}

/// Writes a snapshot as a directory, or as .tar.gz when the path ends so.
/// Refuses to write into an existing non-empty directory.
pub fn write(s: &Snapshot, path: &Path) -> Result<()> {
    let origin = path.display().to_string();
    let files = rel_files(s)?;
    if is_tar_gz(path) {
        let tmp = path.with_extension("partial");
        let f = std::fs::File::create(&tmp).map_err(|e| ReadError::io(&origin, e))?;
        let mut ar = tar::Builder::new(flate2::write::GzEncoder::new(
            f,
            flate2::Compression::default(),
        ));
        let mtime = s.meta.taken_unix_s.unwrap_or(0.0).max(0.0) as u64;
        for (rel, data) in &files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(mtime);
            h.set_cksum();
            ar.append_data(&mut h, rel, data.as_slice())
                .map_err(|e| ReadError::io(&origin, e))?;
        }
        let gz = ar.into_inner().map_err(|e| ReadError::io(&origin, e))?;
        gz.finish()
            .and_then(|mut f| f.flush())
            .map_err(|e| ReadError::io(&origin, e))?;
        std::fs::rename(&tmp, path).map_err(|e| ReadError::io(&origin, e))?;
        return Ok(());
    }
    if path.exists()
        && std::fs::read_dir(path)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(ReadError::parse(
            &origin,
            "exists and is not an empty directory; refusing to overwrite",
        ));
    }
    for (rel, data) in &files {
        let p = path.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| ReadError::io(&parent.display().to_string(), e))?;
        }
        std::fs::write(&p, data).map_err(|e| ReadError::io(&p.display().to_string(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Source;

    fn sample_snapshot() -> Snapshot {
        Snapshot {
            meta: Meta {
                format: FORMAT.into(),
                interval_s: 1.0,
                hostname: Some("h".into()),
                taken_unix_s: Some(1.0),
                clk_tck: Some(100),
                kernel: None,
                stealscope_version: None,
                sample_hz: Some(10.0),
            },
            t0: MemFs::new("t0").with("/proc/stat", "cpu  1 1 1 1\n"),
            t1: MemFs::new("t1")
                .with("/proc/stat", "cpu  2 2 2 2\n")
                .with("/dev/cpu_dma_latency", [0u8, 0x94, 0x35, 0x77]),
            samples: vec![RawSample {
                t_ns: 5,
                stat: "cpu  1 1 1 1\n".into(),
            }],
            hardware: Hardware {
                cpuid: Some(CpuidDump {
                    arch: "x86_64".into(),
                    leaves: vec![crate::cpuid::Leaf {
                        leaf: 0x4000_0001,
                        subleaf: 0,
                        eax: 0x1007efb,
                        ebx: 0,
                        ecx: 0,
                        edx: 1,
                    }],
                }),
                counters: Some(CounterCapture {
                    opened: vec![crate::perf::Counter::Tsc],
                    missing: vec![crate::perf::Missing {
                        counter: crate::perf::Counter::Cycles,
                        reason: crate::perf::Reason::Open {
                            errno: 2,
                            error: "No such file or directory".into(),
                        },
                        cpus: vec![],
                        device: None,
                    }],
                    samples: vec![crate::perf::CounterSample {
                        t_ns: 5,
                        cpus: vec![crate::perf::CpuRead {
                            cpu: 0,
                            groups: vec![crate::perf::GroupRead {
                                enabled_ns: 10,
                                running_ns: 5,
                                counts: [(crate::perf::Counter::Tsc, u64::MAX)].into(),
                            }],
                        }],
                    }],
                }),
            },
            damage: None,
        }
    }

    #[test]
    fn dir_and_targz_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let s = sample_snapshot();
        for name in ["snap", "snap.tar.gz"] {
            let p = tmp.path().join(name);
            write(&s, &p).unwrap();
            let back = open(&p).unwrap();
            assert_eq!(back.meta, s.meta);
            assert_eq!(back.samples, s.samples);
            assert_eq!(back.hardware, s.hardware);
            assert_eq!(
                back.t1.read("/dev/cpu_dma_latency").unwrap().unwrap(),
                vec![0u8, 0x94, 0x35, 0x77]
            );
            assert_eq!(
                back.t0.read_text("/proc/stat").unwrap().unwrap(),
                "cpu  1 1 1 1\n"
            );
        }
        assert!(
            write(&s, &tmp.path().join("snap")).is_err(),
            "must not overwrite"
        );
    }

    #[test]
    fn bad_meta_is_named() {
        let e = parse_meta(b"{\"format\": \"stealscope-snap", "x/meta.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x/meta.json:"), "{e}");
        let e = parse_meta(
            br#"{"format":"stealscope-snapshot/99","interval_s":1}"#,
            "m",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("format"), "{e}");
        let e = parse_meta(
            br#"{"format":"stealscope-snapshot/1","interval_s":-1}"#,
            "m",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("interval_s"), "{e}");
    }

    #[test]
    fn bad_hardware_files_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("snap");
        write(&sample_snapshot(), &p).unwrap();
        // Edited by hand: no manifest says the file was longer (a cut).
        std::fs::remove_file(p.join(MANIFEST_FILE)).unwrap();
        std::fs::write(p.join(COUNTERS_FILE), b"{\"opened\": 3}").unwrap();
        let e = open(&p).unwrap_err().to_string();
        assert!(
            e.contains("counters.json") && e.contains("not valid"),
            "{e}"
        );
        std::fs::write(p.join(COUNTERS_FILE), b"{}").unwrap();
        std::fs::write(p.join(CPUID_FILE), b"[1,2]").unwrap();
        let e = open(&p).unwrap_err().to_string();
        assert!(e.contains("cpuid.json"), "{e}");
    }

    /// A cut snapshot's sides hold only whole files: each as written (a
    /// rebuilt t1 takes t0's), or the /proc/stat and uptime rebuilt from
    /// the samples (whole lines).
    fn assert_sides_whole(c: &Snapshot, s: &Snapshot, n: usize) {
        for side in [&c.t0, &c.t1] {
            for (path, data) in &side.files {
                if matches!(path.as_str(), "/proc/stat" | "/proc/uptime") {
                    assert!(data.ends_with(b"\n"), "cut at {n}: {path} {data:?}");
                } else {
                    let written = [&s.t0, &s.t1].map(|o| o.files.get(path));
                    assert!(written.contains(&Some(data)), "cut at {n}: {path}");
                }
            }
        }
    }

    /// A snapshot cut anywhere after meta.json is read up to the cut, with
    /// the loss named; before it, an error that says what is missing.
    #[test]
    fn a_cut_snapshot_reports_the_cut_at_every_offset() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = sample_snapshot();
        s.samples.push(RawSample {
            t_ns: 2_000_000_005,
            stat: "cpu  3 3 3 3 0 0 0 9\n".into(),
        });
        // t0 files long and varied enough that deflate hands out part of
        // one: a cut inside a file, not only between files.
        let mut x = 1u64;
        let mut digits = |n: usize| -> String {
            (0..n)
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    format!(" {}", x >> 50)
                })
                .collect()
        };
        let stat = format!("cpu  1 1 1 1\nintr{}\nctxt 9\n", digits(600));
        let interrupts = format!("{}\n", digits(600));
        s.t0 =
            s.t0.with("/proc/stat", stat)
                .with("/proc/interrupts", interrupts);
        let whole = tmp.path().join("s.tar.gz");
        write(&s, &whole).unwrap();
        assert!(open(&whole).unwrap().damage.is_none());
        let bytes = std::fs::read(&whole).unwrap();
        let (mut cut, mut errors) = (0, 0);
        for n in (1..bytes.len()).step_by(7) {
            let p = tmp.path().join(format!("c{n}.tar.gz"));
            std::fs::write(&p, &bytes[..n]).unwrap();
            match open(&p) {
                Ok(c) => {
                    let d = c.damage.as_ref().expect("a cut snapshot says so");
                    assert_eq!(d.file, FileKind::SnapshotArchive);
                    assert!(d.headline().contains("cut off"), "{d:?}");
                    assert_sides_whole(&c, &s, n);
                    cut += 1;
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(e.contains("cut off") || e.contains("meta.json"), "{n}: {e}");
                    errors += 1;
                }
            }
        }
        assert!(cut > 0 && errors > 0, "{cut} cut, {errors} errors");
        // A directory whose t1 lost a file: rebuilt from the samples, the
        // steal of the series kept (9 ticks stolen between the samples).
        let dir = tmp.path().join("d");
        write(&s, &dir).unwrap();
        std::fs::remove_file(dir.join("t1/dev/cpu_dma_latency")).unwrap();
        let c = open(&dir).unwrap();
        let d = c.damage.unwrap();
        assert_eq!(d.file, FileKind::SnapshotDirectory);
        assert_eq!(d.bytes_lost, Some(4));
        assert!(d.why.contains("t1/dev/cpu_dma_latency"), "{d:?}");
        let t1 = c.t1.read_text("/proc/stat").unwrap().unwrap();
        assert!(t1.starts_with("cpu  3 3 3 3 0 0 0 9\n"), "{t1}");
        assert_eq!(d.cut_at_s, Some(2.0));
    }

    proptest::proptest! {
        #[test]
        fn meta_and_samples_never_panic(b in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_meta(&b, "m");
            let _ = parse_samples(&b, "s");
        }
    }
}
