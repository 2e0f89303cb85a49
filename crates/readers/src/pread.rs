//! A file kept open and re-read with pread into a reused buffer: the cheapest
//! way to sample a /proc file repeatedly (no open/close, no allocation).
//!
//! Where a file ends: files the kernel prints whole in one `show` call
//! (/proc/stat, a task's schedstat and stat, sysfs attributes) come whole in one read
//! that is large enough, so a short read is their end, and asking again
//! would make the kernel print all of /proc/stat a second time. Files of
//! many records (/proc/interrupts: a row per interrupt) come one seq_file
//! buffer (a page) per read whatever the read asks for, so for those only
//! a read of 0 bytes is the end: on a host of 16 CPUs /proc/interrupts is
//! several pages.

use crate::error::{ReadError, Result};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAX_BYTES: usize = 64 << 20;

pub struct PreadFile {
    file: std::fs::File,
    buf: Vec<u8>,
    path: String,
    /// Printed whole in one show: a short read is the end.
    one_show: bool,
}

/// The first buffer's size. A task's schedstat is one line of three
/// numbers (at most 62 bytes), and a long scan keeps one open per thread:
/// at 16 KiB each, 10,000 threads held 164 MB of serve's 224 MB, twice
/// that while a rediscovery built the next set beside the old one
/// (heaptrack, issue 29's soak). Any file that outgrows it grows it.
/// A task's stat line is a few hundred bytes (comm, 50 numbers): `place`
/// keeps one open per thread of the host too.
fn first_size(path: &str) -> usize {
    if path.starts_with("/proc/") && path.ends_with("/schedstat") {
        128
    } else if task_stat(path) {
        512
    } else {
        16 * 1024
    }
}

/// /proc/PID/stat or /proc/PID/task/TID/stat (not /proc/stat).
fn task_stat(path: &str) -> bool {
    path.starts_with("/proc/") && path.ends_with("/stat") && path != "/proc/stat"
}

/// The files [`PreadFile`] may take to end at a short read.
fn one_show(path: &str) -> bool {
    path == "/proc/stat"
        || (path.starts_with("/proc/") && path.ends_with("/schedstat"))
        || task_stat(path)
        || path.starts_with("/sys/")
}

impl std::os::fd::AsRawFd for PreadFile {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

impl PreadFile {
    /// Opens `path` (absolute, e.g. "/proc/stat") under `root`.
    pub fn open(root: &Path, path: &str) -> Result<Self> {
        let full = root.join(path.trim_start_matches('/'));
        let file = std::fs::File::open(full).map_err(|e| ReadError::io(path, e))?;
        Ok(PreadFile {
            file,
            buf: vec![0; first_size(path)],
            path: path.to_string(),
            one_show: one_show(path),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Appends the whole file to `out`, returning how many bytes: a file of
    /// one show that fits the buffer's size goes by one pread straight into
    /// `out`'s spare room, with no copy (the sampler's quiet path, where a
    /// copy wrote to cold cache lines and ran libc's memmove cold after
    /// each sleep); any other by [`PreadFile::read`] and a copy.
    #[inline]
    pub fn read_append(&mut self, out: &mut Vec<u8>) -> Result<usize> {
        if self.one_show {
            out.reserve(self.buf.len());
            let spare = out.spare_capacity_mut();
            // SAFETY: pread writes at most `spare.len()` bytes into memory
            // `out` owns; only the `n` it wrote are then counted as set.
            let n = unsafe {
                libc::pread(
                    std::os::fd::AsRawFd::as_raw_fd(&self.file),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    0,
                )
            };
            if n >= 0 && (n as usize) < spare.len() {
                // SAFETY: as above, the first `n` spare bytes were written.
                unsafe { out.set_len(out.len() + n as usize) };
                return Ok(n as usize);
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(ReadError::io(&self.path, e));
                }
            }
            // Filled the room (the file grew) or interrupted: as below.
        }
        let b = self.read()?;
        out.extend_from_slice(b);
        Ok(b.len())
    }

    /// Reads the whole file from offset 0; grows the buffer when it fills.
    pub fn read(&mut self) -> Result<&[u8]> {
        loop {
            let mut len = 0;
            while len < self.buf.len() {
                match self.file.read_at(&mut self.buf[len..], len as u64) {
                    Ok(0) => return Ok(&self.buf[..len]),
                    // One show: a short read is the end (module comment);
                    // asking again would cost half the sampling at 100 Hz.
                    Ok(n) if self.one_show && len + n < self.buf.len() => {
                        return Ok(&self.buf[..len + n])
                    }
                    Ok(n) => len += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ReadError::io(&self.path, e)),
                }
            }
            if self.buf.len() >= MAX_BYTES {
                return Err(ReadError::parse(
                    &self.path,
                    format!("larger than {MAX_BYTES} bytes"),
                ));
            }
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
        }
    }

    /// Reads the file as text.
    pub fn read_text(&mut self) -> Result<&str> {
        // No copy of the path per read: this is the 1000 Hz sampling path.
        let len = self.read()?.len();
        std::str::from_utf8(&self.buf[..len]).map_err(|_| ReadError::parse(&self.path, "not text"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appending gives what `read` gives, after what `out` held: straight
    /// into `out` for a file of one show that fits, by the general path for
    /// one that grew past the buffer and for files of many records.
    #[test]
    fn read_append_appends_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        for (path, len) in [
            ("/proc/stat", 1217),
            ("/proc/stat", 40_000),
            ("/proc/interrupts", 9000),
        ] {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            std::fs::write(dir.path().join(&path[1..]), &text).unwrap();
            let mut f = PreadFile::open(dir.path(), path).unwrap();
            let mut out = b"held".to_vec();
            for round in 1..=2 {
                assert_eq!(f.read_append(&mut out).unwrap(), len, "{path} {len}");
                assert_eq!(out.len(), 4 + round * len);
                assert_eq!(&out[out.len() - len..], &text[..], "{path} {len}");
            }
            assert_eq!(&out[..4], b"held");
            assert_eq!(f.read().unwrap(), &text[..]);
        }
    }

    #[test]
    fn reads_small_and_growing_files_whole() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0usize, 1171, 16 * 1024, 16 * 1024 + 1, 100_000] {
            let text: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            std::fs::write(dir.path().join("f"), &text).unwrap();
            let mut f = PreadFile::open(dir.path(), "/f").unwrap();
            assert_eq!(f.read_text().unwrap(), text, "{len} bytes");
            // Again, with the buffer grown by the first read.
            assert_eq!(f.read_text().unwrap(), text, "{len} bytes, re-read");
        }
    }

    /// A file of many records comes a page per read: read to its end, not
    /// to the first short read (/proc/kallsyms: megabytes, fixed while no
    /// module loads).
    #[test]
    fn a_file_of_many_records_is_read_past_its_first_page() {
        let mut f = PreadFile::open(Path::new("/"), "/proc/kallsyms").unwrap();
        let ours = f.read().unwrap().len();
        let whole = std::fs::read("/proc/kallsyms").unwrap().len();
        assert!(whole > 16 * 1024, "{whole} bytes");
        assert_eq!(ours, whole);
    }

    #[test]
    fn proc_stat_is_read_whole() {
        let mut f = PreadFile::open(Path::new("/"), "/proc/stat").unwrap();
        let text = f.read_text().unwrap().to_string();
        assert!(text.starts_with("cpu ") && text.ends_with('\n'), "{text}");
        assert!(text.contains("\nprocs_running "), "{text}");
    }
}
