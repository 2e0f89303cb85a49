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

    pub fn is_gone(&self) -> bool {
        matches!(self, ApplyError::Gone { .. })
    }
}
