//! Errors of the fleet commands: one line each, naming the Prometheus and
//! the query.

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("--prometheus {0}: expected an http:// or https:// URL")]
    Url(String),
    #[error("Prometheus at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("Prometheus at {url}: query {query} timed out after {secs} s (raise --timeout, narrow --selector or --window)")]
    Timeout {
        url: String,
        query: &'static str,
        secs: f64,
    },
    #[error("Prometheus refused query {query}: {reason}")]
    Refused { query: &'static str, reason: String },
    #[error("Prometheus answered query {query} with what we cannot read: {reason}")]
    Answer { query: &'static str, reason: String },
    #[error("Prometheus at {url} has no stealscope host metrics{sel}: is `stealscope serve` (0.1 or later, with stealscope_host_cpus) scraped there?")]
    NoHosts { url: String, sel: String },
    #[error(
        "--selector {0:?}: expected label matchers such as job=\"stealscope\",dc=\"x\" (no braces)"
    )]
    Selector(String),
    #[error("--window {0:?}: expected a Prometheus duration such as 1h or 30m")]
    Window(String),
}
