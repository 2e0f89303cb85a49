//! Reading a tracefs text file (format, header_page, stats) whole: its
//! own module because both the event-format parser and the route read them.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// A tracefs text file in one read: header_page (6.18) answers end-of-file
/// to any read after the first, so std's small probing reads lose its tail.
pub fn read_text(p: &Path) -> std::result::Result<String, String> {
    let err = |e: std::io::Error| format!("{}: {e}", p.display());
    let mut f = File::open(p).map_err(err)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    loop {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
        if n == buf.len() {
            buf.resize(n * 2, 0);
        }
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|_| format!("{}: not text", p.display()))
}
