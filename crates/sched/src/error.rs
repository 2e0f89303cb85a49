//! Errors of a running collector name what failed (a map, a file).

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// A tracefs or procfs file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The BPF side failed (a map lookup or update).
    #[error("bpf {what}: {msg}")]
    Bpf { what: String, msg: String },
    /// A trace record was not what the format file says.
    #[error("{path}: {msg}")]
    Format { path: String, msg: String },
}

pub type Result<T> = std::result::Result<T, CollectError>;
