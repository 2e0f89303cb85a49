//! `stealscope serve`: samples /proc/stat (and vCPU threads on a host) in
//! the background, runs the doctor rules periodically, and serves the
//! metrics over a read-only, loopback-by-default HTTP endpoint; optionally
//! also as a node_exporter textfile.
//!
//! Threads: the engine's sampler and rule runner (crates/engine, plain
//! threads on a steady clock; [`feed`] is what they update), and a
//! single-threaded tokio runtime for HTTP and the textfile.

mod facts;
mod feed;
mod http;
mod shared;
mod textfile;

use shared::{Scrapes, Shared};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use stealscope_engine::capture::clk_tck;
use stealscope_model::machine::DEFAULT_CLK_TCK;
use stealscope_model::running::RunningCpuTimes;
use stealscope_readers::ReadError;

/// How long the first scrape may wait for the sampler's first reading:
/// long beside one /proc/stat read, short beside a scrape timeout.
const FIRST_SAMPLE_WAIT: Duration = Duration::from_secs(3);

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
    let opened = stealscope_engine::Opened::open(
        stealscope_engine::SamplerOptions {
            counters: stealscope_engine::CounterReads::EverySample,
            // Scheduler events only from the live kernel, and only once a
            // host scan finds vCPU threads.
            sched: opts.root == std::path::Path::new("/"),
            ..stealscope_engine::SamplerOptions::new(&opts.root)
        },
        None,
    )?;
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

    let shared = Arc::new(Shared::default());
    let clk = clk_tck().unwrap_or(DEFAULT_CLK_TCK) as f64;
    let missing = opened
        .sampler()
        .counters()
        .map(|c| c.missing().to_vec())
        .unwrap_or_default();
    shared.update(|s| {
        s.cpu = RunningCpuTimes::new(clk);
        s.hw_missing = missing;
        s.host = facts::host_facts(&stealscope_readers::RootFs::new(&opts.root));
    });
    let engine = stealscope_engine::Live::start(
        opened,
        opts.rate_hz,
        opts.findings_every,
        feed::Feed::new(shared.clone(), opts.root.clone()),
        Arc::new(feed::FindingsFeed(shared.clone())),
    )
    .map_err(ServeError::Runtime)?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    // The socket is bound, so a scraper that comes now waits in the
    // backlog instead of getting a page without the CPU counters.
    if !shared.wait_sampled(FIRST_SAMPLE_WAIT) {
        log("no sample yet: answering before the first one");
    }
    let scrapes = Arc::new(Scrapes::new(shared.clone()));
    log(&format!("listening on http://{addr}/metrics"));
    let served = runtime.block_on(async {
        if let Some(path) = opts.textfile.clone() {
            tokio::spawn(textfile::run(path, opts.textfile_every, scrapes.clone()));
        }
        http::serve(listener, scrapes, opts.limits, shutdown_signal()).await
    });
    engine.stop();
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
