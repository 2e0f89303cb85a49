//! Errors carry the path they came from, so every message names the file.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file exists but could not be read (permission, I/O error, ...).
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but its content is not what the kernel writes.
    #[error("{path}: {msg}")]
    Parse { path: String, msg: String },
}

impl ReadError {
    pub fn parse(path: &str, msg: impl fmt::Display) -> Self {
        ReadError::Parse {
            path: path.to_string(),
            msg: msg.to_string(),
        }
    }

    pub fn io(path: &str, source: std::io::Error) -> Self {
        ReadError::Io {
            path: path.to_string(),
            source,
        }
    }

    pub fn path(&self) -> &str {
        match self {
            ReadError::Io { path, .. } | ReadError::Parse { path, .. } => path,
        }
    }
}

pub type Result<T> = std::result::Result<T, ReadError>;
