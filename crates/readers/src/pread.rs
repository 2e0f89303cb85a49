//! A file kept open and re-read with pread into a reused buffer: the cheapest
//! way to sample a /proc file repeatedly (no open/close, no allocation).

use crate::error::{ReadError, Result};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAX_BYTES: usize = 64 << 20;

pub struct PreadFile {
    file: std::fs::File,
    buf: Vec<u8>,
    path: String,
}

impl PreadFile {
    /// Opens `path` (absolute, e.g. "/proc/stat") under `root`.
    pub fn open(root: &Path, path: &str) -> Result<Self> {
        let full = root.join(path.trim_start_matches('/'));
        let file = std::fs::File::open(full).map_err(|e| ReadError::io(path, e))?;
        Ok(PreadFile {
            file,
            buf: vec![0; 16 * 1024],
            path: path.to_string(),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Reads the whole file from offset 0; grows the buffer when it fills.
    pub fn read(&mut self) -> Result<&[u8]> {
        loop {
            let mut len = 0;
            while len < self.buf.len() {
                match self.file.read_at(&mut self.buf[len..], len as u64) {
                    Ok(0) => return Ok(&self.buf[..len]),
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
