//! `stealscope serve`: the Prometheus exporter (crates/serve) with its flags.

use crate::parse::{parse_duration, parse_rate};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on; loopback unless you say otherwise (port 0 = any free port)
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Sampling rate of /proc/stat, Hz; each sample is one steal window (10 Hz = 100 ms)
    #[arg(long, default_value_t = 10.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Run the doctor rules this often, over the interval just past
    #[arg(long, default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub findings_interval: Duration,
    /// Also write the metrics for node_exporter's textfile collector (a .prom file, replaced atomically)
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
    /// How often to rewrite --textfile
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub textfile_interval: Duration,
    /// Read /proc and /sys under this directory instead of /
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

pub fn run(a: &ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    stealscope_serve::run(stealscope_serve::Options {
        listen: a.listen,
        rate_hz: a.rate,
        findings_every: a.findings_interval,
        textfile: a.textfile.clone(),
        textfile_every: a.textfile_interval,
        root: a.root.clone(),
        limits: stealscope_serve::Limits::default(),
    })?;
    Ok(())
}
