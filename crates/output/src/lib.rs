//! Output: renderers for the reports (text for people, JSON for scripts) and
//! the Prometheus exposition of `serve`.

pub mod bins;
pub mod html;
pub mod json;
pub mod metrics;
pub mod metrics_noisy;
pub mod place;
pub mod probe;
pub mod sim;
pub mod text;
pub mod tui;
pub mod who_time;
