//! `stealscope serve`: samples /proc/stat (and vCPU threads on a host) in
//! the background, runs the doctor rules periodically, and serves the
//! metrics over a read-only, loopback-by-default HTTP endpoint; optionally
//! also as a node_exporter textfile.
//!
//! Threads: one sampler, one rule runner (both plain threads on a steady
//! clock), and a single-threaded tokio runtime for HTTP and the textfile.

mod http;
mod rules;
mod sampler;
mod shared;
mod textfile;

use shared::{Scrapes, Shared, Stop};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use stealscope_readers::ReadError;

pub use http::Limits;

#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    /// Sampling rate of /proc/stat; one window per sample.
    pub rate_hz: f64,
    /// Run the rules over this much of the past, this often.
    pub findings_every: Duration,
    /// node_exporter textfile-collector output (a `.prom` file).
    pub textfile: Option<PathBuf>,
    pub textfile_every: Duration,
    /// Read /proc and /sys under this directory.
    pub root: PathBuf,
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--listen {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}: no proc/ under this root")]
    Root(PathBuf),
    #[error("--rate must be above 0 Hz for serve")]
    Rate,
    #[error("--textfile {path}: {reason}")]
    Textfile { path: PathBuf, reason: String },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs until SIGTERM or SIGINT.
pub fn run(opts: Options) -> Result<(), ServeError> {
    if opts.rate_hz.is_nan() || opts.rate_hz <= 0.0 {
        return Err(ServeError::Rate);
    }
    if !opts.root.join("proc").is_dir() {
        return Err(ServeError::Root(opts.root.clone()));
    }
    if let Some(p) = &opts.textfile {
        textfile::check(p)?;
    }
    let sampler = sampler::Sampler::open(&opts.root)?;
    let listener =
        std::net::TcpListener::bind(opts.listen).map_err(|source| ServeError::Listen {
            addr: opts.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Listen {
        addr: opts.listen,
        source,
    })?;
    if !addr.ip().is_loopback() {
        log(&format!(
            "{addr} is not a loopback address: the metrics are readable from the network"
        ));
    }

    let shared = Arc::new(Shared::new(opts.rate_hz, opts.findings_every));
    let stop = Arc::new(Stop::default());
    let threads = [
        {
            let (shared, stop, root) = (shared.clone(), stop.clone(), opts.root.clone());
            let rate = opts.rate_hz;
            std::thread::Builder::new()
                .name("sampler".into())
                .spawn(move || sampler.run(&root, rate, &shared, &stop))
        },
        {
            let (shared, stop, root) = (shared.clone(), stop.clone(), opts.root.clone());
            let (rate, every) = (opts.rate_hz, opts.findings_every);
            std::thread::Builder::new()
                .name("rules".into())
                .spawn(move || rules::run(&root, rate, every, &shared, &stop))
        },
    ];
    let threads: Vec<_> = threads
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(ServeError::Runtime)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let scrapes = Arc::new(Scrapes::new(shared.clone()));
    log(&format!("listening on http://{addr}/metrics"));
    let served = runtime.block_on(async {
        if let Some(path) = opts.textfile.clone() {
            tokio::spawn(textfile::run(path, opts.textfile_every, scrapes.clone()));
        }
        http::serve(listener, scrapes, opts.limits, shutdown_signal()).await
    });
    stop.stop();
    for t in threads {
        let _ = t.join();
    }
    served.map_err(ServeError::Runtime)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the default action still ends the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// One line on stderr: the service log (journald adds the time).
pub(crate) fn log(msg: &str) {
    eprintln!("stealscope serve: {msg}");
}
