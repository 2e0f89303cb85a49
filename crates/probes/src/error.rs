//! Probe errors. Things the probe can work around (no SCHED_FIFO, no mlock, no
//! tracefs) are not errors but notes in the report; these are the ones it
//! cannot.

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Options that make no sense (zero duration, CPU not online, ...).
    #[error("{0}")]
    Options(String),
    /// A system call the probe cannot do without.
    #[error("{what}: {source}")]
    Sys {
        what: String,
        #[source]
        source: nix::Error,
    },
    /// A kernel file could not be read or parsed (the message names it).
    #[error(transparent)]
    Read(#[from] stealscope_readers::ReadError),
    /// A probe thread could not be started or died.
    #[error("probe thread: {0}")]
    Thread(String),
}

impl ProbeError {
    pub(crate) fn sys(what: impl Into<String>, source: nix::Error) -> Self {
        ProbeError::Sys {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn spawn(cpu: u32, e: std::io::Error) -> Self {
        ProbeError::Thread(format!("cannot start the thread for CPU {cpu}: {e}"))
    }
}
