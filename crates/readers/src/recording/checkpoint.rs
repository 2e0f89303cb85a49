//! Checkpoint payload: the files of one snapshot side (what `doctor` reads),
//! deflated at the fastest level. A file whose bytes equal those in the
//! previous checkpoint is stored as a reference to it, so a checkpoint a
//! minute costs little when little changed.

use super::codec::{err, pack_with, put_bytes, put_str, put_u64, unpack, DResult, Dec, Effort};
use std::collections::BTreeMap;

const FULL: u8 = 0;
const SAME: u8 = 1;

pub type Files = BTreeMap<String, Vec<u8>>;

#[derive(Default)]
pub struct CheckpointEncoder {
    prev: Files,
}

impl CheckpointEncoder {
    pub fn encode(&mut self, t_ns: u64, files: &Files) -> Vec<u8> {
        let mut body = Vec::new();
        put_u64(&mut body, files.len() as u64);
        for (path, data) in files {
            if self.prev.get(path) == Some(data) {
                body.push(SAME);
                put_str(&mut body, path);
            } else {
                body.push(FULL);
                put_str(&mut body, path);
                put_bytes(&mut body, data);
            }
        }
        self.prev.clone_from(files);
        let mut out = Vec::new();
        put_u64(&mut out, t_ns);
        out.extend_from_slice(&pack_with(&body, Effort::Fast));
        out
    }
}

#[derive(Default)]
pub struct CheckpointDecoder {
    prev: Files,
}

impl CheckpointDecoder {
    pub fn decode(&mut self, payload: &[u8]) -> DResult<(u64, Files)> {
        let mut d = Dec::new(payload);
        let t_ns = d.u64()?;
        let body = unpack(d.rest())?;
        let mut d = Dec::new(&body);
        let n = d.count(3, "file")?;
        let mut files = Files::new();
        for _ in 0..n {
            let tag = d.u8()?;
            let path = d.str()?;
            if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
                return err(format!("file path {path:?} is not absolute and plain"));
            }
            let data = match tag {
                FULL => d.bytes()?.to_vec(),
                SAME => match self.prev.get(path) {
                    Some(v) => v.clone(),
                    None => {
                        return err(format!(
                            "{path} refers to a previous checkpoint that does not have it"
                        ))
                    }
                },
                t => return err(format!("{path}: unknown entry tag {t}")),
            };
            files.insert(path.to_string(), data);
        }
        d.finish()?;
        self.prev.clone_from(&files);
        Ok((t_ns, files))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_files_refer_to_the_previous_checkpoint() {
        let mut files = Files::new();
        files.insert("/proc/stat".into(), b"cpu  1 2 3 4\n".to_vec());
        files.insert("/big".into(), vec![b'x'; 10_000]);
        let mut enc = CheckpointEncoder::default();
        let first = enc.encode(5, &files);
        files.insert("/proc/stat".into(), b"cpu  2 2 3 4\n".to_vec());
        let second = enc.encode(9, &files);
        let mut dec = CheckpointDecoder::default();
        assert_eq!(dec.decode(&first).unwrap().0, 5);
        let (t, back) = dec.decode(&second).unwrap();
        assert_eq!((t, &back), (9, &files));
        // Without the first checkpoint the reference cannot be resolved.
        let e = CheckpointDecoder::default().decode(&second).unwrap_err();
        assert!(e.0.contains("/big"), "{e}");
    }
}
