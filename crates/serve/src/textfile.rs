//! node_exporter textfile-collector output: the classic text format written
//! to a temporary file beside the target and renamed over it, so the
//! collector never reads half a file.

use crate::shared::Scrapes;
use crate::{log, ServeError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use stealscope_output::metrics::Format;

fn tmp_path(path: &Path) -> PathBuf {
    // Not ending in .prom: the collector ignores it until the rename.
    let mut p = path.as_os_str().to_owned();
    p.push(".tmp");
    PathBuf::from(p)
}

/// Fails at start-up, not on the first write, when the path cannot work.
pub(crate) fn check(path: &Path) -> Result<(), ServeError> {
    let err = |reason: String| ServeError::Textfile {
        path: path.to_path_buf(),
        reason,
    };
    if path.extension().and_then(|e| e.to_str()) != Some("prom") {
        return Err(err(
            "must end in .prom (the textfile collector reads only those)".into(),
        ));
    }
    write(path, b"").map_err(|e| err(e.to_string()))
}

fn write(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

pub(crate) async fn run(path: PathBuf, every: Duration, scrapes: Arc<Scrapes>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        let body = scrapes.body(Format::Text);
        let p = path.clone();
        let r = tokio::task::spawn_blocking(move || write(&p, &body)).await;
        match r {
            Ok(Ok(())) => failing = false,
            Ok(Err(e)) if !failing => {
                log(&format!("--textfile {}: {e}", path.display()));
                failing = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_must_be_a_writable_prom_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = check(&dir.path().join("x.txt")).unwrap_err().to_string();
        assert!(e.contains("x.txt") && e.contains(".prom"), "{e}");
        let e = check(&dir.path().join("missing/x.prom"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing/x.prom"), "{e}");
        check(&dir.path().join("x.prom")).unwrap();
    }

    #[test]
    fn write_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.prom");
        write(&p, b"a 1\n").unwrap();
        write(&p, b"a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["s.prom"]);
    }
}
