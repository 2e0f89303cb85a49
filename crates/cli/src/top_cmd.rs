//! `stealscope top`: the live view. Three threads: the engine's sampler and
//! rule runner (crates/engine, filling its view) and this one, which runs
//! the screen's loop (crates/output/src/tui/run.rs, which also restores the
//! terminal on every way out). This file opens the engine and says how a
//! view becomes a frame.

use crate::parse::{parse_duration, parse_rate};
use clap::Args;
use ratatui::Frame;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stealscope_actuators::apply::FAILPOINT_ENV;
use stealscope_engine::view::{self, SharedView, View};
use stealscope_engine::Live;
use stealscope_output::tui::{self, run, FindingsInput, TopInput, UiState};

type Error = Box<dyn std::error::Error>;

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Sampling rate, Hz: one steal window per sample (10 Hz = 100 ms); + and - change it live
    #[arg(long, default_value_t = 10.0, value_parser = parse_top_rate)]
    pub rate: f64,
    /// Run the doctor rules this often, over the interval just past
    #[arg(long, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub findings_interval: Duration,
    /// Read /proc and /sys under this directory instead of /
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

fn parse_top_rate(s: &str) -> Result<f64, String> {
    let v = parse_rate(s)?;
    if v <= 0.0 {
        return Err("top samples continuously: the rate must be above 0 Hz".into());
    }
    Ok(v)
}

/// `STEALSCOPE_FAILPOINT=top-panic`: panic after the first frame, so that a
/// test sees the terminal restored by the panic hook.
const PANIC_FAILPOINT: &str = "top-panic";

pub fn run(a: &TopArgs) -> Result<(), Error> {
    if !std::io::stdout().is_terminal() {
        return Err("top is interactive and stdout is not a terminal (for a report use `stealscope doctor`, for metrics `stealscope serve`)".into());
    }
    if !a.root.join("proc").is_dir() {
        return Err(format!("{}: no proc/ under this root", a.root.display()).into());
    }
    // Started before the terminal is taken over, so errors print plainly.
    let started = view::start(&a.root, a.rate, a.findings_interval)?;
    run::end_on_signals()?;
    let mut terminal = ratatui::try_init()?;
    let mut screen = Screen {
        view: &started.view,
        engine: &started.live,
        hostname: started.hostname.as_deref(),
        every: a.findings_interval,
        guest: started.guest,
        frozen: None,
    };
    let fail = std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == PANIC_FAILPOINT);
    let ui = UiState {
        rate_hz: started.live.rate_hz(),
        ..Default::default()
    };
    let result = run::run(
        &mut terminal,
        &mut screen,
        ui,
        fail.then_some(PANIC_FAILPOINT),
    );
    ratatui::restore();
    started.live.stop();
    Ok(result?)
}

struct Screen<'a> {
    view: &'a SharedView,
    engine: &'a Live,
    hostname: Option<&'a str>,
    every: Duration,
    guest: bool,
    /// While paused: the view as it was, and when.
    frozen: Option<(View, Instant)>,
}

impl run::Screen for Screen<'_> {
    fn failed(&self) -> Option<String> {
        self.engine
            .failed()
            .then(|| "a sampling thread stopped (see the message above)".into())
    }

    fn draw(&mut self, f: &mut Frame, ui: &UiState) {
        match &self.frozen {
            Some((view, at)) => self.frame(f, view, *at, ui),
            None => self.frame(f, &self.view.lock(), Instant::now(), ui),
        }
    }

    fn pause(&mut self, paused: bool) {
        self.frozen = paused.then(|| (self.view.lock().clone(), Instant::now()));
    }

    fn set_rate_hz(&mut self, hz: f64) {
        self.engine.set_rate_hz(hz);
    }
}

impl Screen<'_> {
    fn frame(&self, f: &mut Frame, view: &View, now: Instant, ui: &UiState) {
        let input = TopInput {
            hostname: self.hostname,
            windows: &view.windows,
            exact: &view.exact,
            vms: view.host.then(|| view.vms.rows()),
            culprits: &view.culprits,
            guest: self.guest,
            findings: FindingsInput {
                findings: &view.findings,
                age_s: view
                    .findings_at
                    .map(|t| now.saturating_duration_since(t).as_secs_f64()),
                every_s: self.every.as_secs_f64(),
                error: view.findings_error.as_deref(),
            },
            ui,
            notice: view.sample_error.as_deref().or(view.host_error.as_deref()),
        };
        tui::draw(f, &input);
    }
}
