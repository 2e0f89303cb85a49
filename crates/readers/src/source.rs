//! Where files come from: the live machine, a root directory (snapshot side,
//! fixture, chroot), or either of them with every read recorded so it can be
//! written out as a snapshot. All readers go through [`Source`], which is what
//! makes "offline gives the same report as live" true by construction.

use crate::error::{ReadError, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Largest file we accept; /proc/interrupts on a 1024-CPU host is ~10 MiB.
const MAX_FILE_BYTES: u64 = 64 << 20;
/// Record size for character devices such as /dev/kmsg (one record per read).
const RECORD_BUF: usize = 16 * 1024;

pub trait Source {
    /// Reads a whole file by absolute path ("/proc/stat"). `Ok(None)` when the
    /// file does not exist: absent means "not available", never zero.
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>>;
    /// Names in a directory, sorted. `Ok(None)` when it does not exist.
    fn list(&self, dir: &str) -> Result<Option<Vec<String>>>;
    /// Human name of the source, for messages ("/", "snapshot t0").
    fn describe(&self) -> String;

    /// CLOCK_MONOTONIC now, ns, when this source is the live machine (a
    /// reader stamps when it read what: a walk of every process takes
    /// long enough under load to skew each process's interval); None for a
    /// snapshot, whose stamps are stored beside its files.
    fn now_ns(&self) -> Option<u64> {
        None
    }

    /// Reads a file as UTF-8 text (lossy replacement would hide garbage, so
    /// invalid UTF-8 is a parse error naming the file).
    fn read_text(&self, path: &str) -> Result<Option<String>> {
        match self.read(path)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|e| {
                ReadError::parse(
                    path,
                    format!(
                        "not text (invalid UTF-8 at byte {})",
                        e.utf8_error().valid_up_to()
                    ),
                )
            }),
        }
    }

    /// A one-value sysfs/procfs file, trimmed.
    fn read_value(&self, path: &str) -> Result<Option<String>> {
        Ok(self.read_text(path)?.map(|s| s.trim().to_string()))
    }
}

/// Files under a root directory: "/" for the live machine, or a snapshot side.
#[derive(Debug, Clone)]
pub struct RootFs {
    root: PathBuf,
}

impl RootFs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RootFs { root: root.into() }
    }

    pub fn live() -> Self {
        RootFs::new("/")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn resolve(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

fn read_device(file: &mut std::fs::File, path: &str) -> Result<Vec<u8>> {
    // Character devices (/dev/kmsg, /dev/cpu_dma_latency) hand out one record
    // per read and block at the end; opened non-blocking we stop at EAGAIN.
    let mut out = Vec::new();
    let mut buf = vec![0u8; RECORD_BUF];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() as u64 > MAX_FILE_BYTES {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            // kmsg: records were overwritten while we read; continue with the next.
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::io(path, e)),
        }
    }
    Ok(out)
}

impl Source for RootFs {
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        use std::os::unix::fs::OpenOptionsExt;
        let full = self.resolve(path);
        let mut file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_o_nonblock())
            .open(&full)
        {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            // ENODEV/ENXIO: sysfs attribute whose device went away (CPU offlined).
            Err(e) if matches!(e.raw_os_error(), Some(19) | Some(6)) => return Ok(None),
            Err(e) => return Err(ReadError::io(path, e)),
        };
        // Only /dev holds character devices; skipping fstat elsewhere saves a
        // syscall per file on scans of thousands of /proc files.
        if path.starts_with("/dev/") {
            let meta = file.metadata().map_err(|e| ReadError::io(path, e))?;
            if meta.file_type().is_char_device() {
                return read_device(&mut file, path).map(Some);
            }
        }
        let mut out = Vec::with_capacity(4096);
        match (&mut file).take(MAX_FILE_BYTES + 1).read_to_end(&mut out) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(21) => {
                return Err(ReadError::parse(path, "is a directory, expected a file"))
            }
            Err(e) if matches!(e.raw_os_error(), Some(19) | Some(6)) => return Ok(None),
            Err(e) => return Err(ReadError::io(path, e)),
        }
        if out.len() as u64 > MAX_FILE_BYTES {
            return Err(ReadError::parse(
                path,
                format!("larger than {MAX_FILE_BYTES} bytes"),
            ));
        }
        Ok(Some(out))
    }

    fn list(&self, dir: &str) -> Result<Option<Vec<String>>> {
        let full = self.resolve(dir);
        let rd = match std::fs::read_dir(&full) {
            Ok(rd) => rd,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ReadError::io(dir, e)),
        };
        let mut names = Vec::new();
        for entry in rd {
            // An entry vanishing mid-listing (a process exiting) is not an error.
            let Ok(entry) = entry else { continue };
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(Some(names))
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    fn now_ns(&self) -> Option<u64> {
        Some(crate::clock::monotonic_ns())
    }
}

const fn libc_o_nonblock() -> i32 {
    0o4000 // O_NONBLOCK on Linux (all architectures we build for)
}

/// Wraps a source and keeps a copy of every file read through it, so the
/// exact bytes the rules saw can be written out as a snapshot.
pub struct Recorder<S> {
    inner: S,
    files: RefCell<BTreeMap<String, Vec<u8>>>,
}

impl<S: Source> Recorder<S> {
    pub fn new(inner: S) -> Self {
        Recorder {
            inner,
            files: RefCell::new(BTreeMap::new()),
        }
    }

    /// Every file read so far, by absolute path.
    pub fn into_files(self) -> BTreeMap<String, Vec<u8>> {
        self.files.into_inner()
    }
}

impl<S: Source> Source for Recorder<S> {
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let data = self.inner.read(path)?;
        if let Some(bytes) = &data {
            self.files
                .borrow_mut()
                .insert(path.to_string(), bytes.clone());
        }
        Ok(data)
    }

    fn list(&self, dir: &str) -> Result<Option<Vec<String>>> {
        self.inner.list(dir)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn now_ns(&self) -> Option<u64> {
        self.inner.now_ns()
    }
}

/// Files held in memory (tests, tar.gz snapshots read without unpacking).
#[derive(Debug, Default, Clone)]
pub struct MemFs {
    pub files: BTreeMap<String, Vec<u8>>,
    pub name: String,
}

impl MemFs {
    pub fn new(name: &str) -> Self {
        MemFs {
            files: BTreeMap::new(),
            name: name.to_string(),
        }
    }

    pub fn with(mut self, path: &str, content: impl AsRef<[u8]>) -> Self {
        self.insert(path, content);
        self
    }

    pub fn insert(&mut self, path: &str, content: impl AsRef<[u8]>) {
        let key = format!("/{}", path.trim_start_matches('/'));
        self.files.insert(key, content.as_ref().to_vec());
    }
}

impl Source for MemFs {
    fn read(&self, path: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.files.get(path).cloned())
    }

    fn list(&self, dir: &str) -> Result<Option<Vec<String>>> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        names.dedup();
        Ok(Some(names))
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}
