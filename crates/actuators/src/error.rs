//! Errors of the appliers: each names what it touched and what went wrong.

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The thread or process exited: its remaining actions are moot.
    #[error("{what}: gone (exited)")]
    Gone { what: String },
    /// Refused before changing anything, with the reason.
    #[error("refused: {0}")]
    Refused(String),
    #[error("{path}: {msg}")]
    Io { path: String, msg: String },
    /// Not allowed to read or write `path` (not root): `need` says what
    /// would be allowed to.
    #[error("{path}: permission denied; {need}")]
    Denied { path: String, need: String },
    #[error("{0}")]
    Other(String),
}

impl ApplyError {
    pub fn io(path: impl Into<String>, e: impl std::fmt::Display) -> Self {
        ApplyError::Io {
            path: path.into(),
            msg: e.to_string(),
        }
    }

    /// `e` on `path`, as [`ApplyError::Denied`] when it is a permission error.
    pub fn io_or_denied(path: &std::path::Path, e: std::io::Error, need: &str) -> Self {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            ApplyError::Denied {
                path: path.display().to_string(),
                need: need.to_string(),
            }
        } else {
            ApplyError::io(path.display().to_string(), e)
        }
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, ApplyError::Gone { .. })
    }
}
