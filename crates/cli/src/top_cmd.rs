//! `stealscope top`: the live view. Three threads: the engine's sampler and
//! rule runner (crates/engine, filling its view) and this one, which
//! handles keys, resizes and signals and draws (crates/output/src/tui).
//! The terminal is restored on every way out: q, Esc or Ctrl-C, SIGTERM,
//! SIGINT or SIGHUP (see [`end_on_signals`]), an error, and a panic (the
//! hook ratatui installs).

use crate::parse::{parse_duration, parse_rate};
use clap::Args;
use ratatui::crossterm::event::{self, Event};
use ratatui::DefaultTerminal;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stealscope_actuators::apply::FAILPOINT_ENV;
use stealscope_engine::capture::clk_tck;
use stealscope_engine::host::HostTracker;
use stealscope_engine::view::{SharedView, View, ViewFeed};
use stealscope_engine::{Live, Opened, SamplerOptions};
use stealscope_model::machine::DEFAULT_CLK_TCK;
use stealscope_output::tui::{self, keys, FindingsInput, TopInput, UiState};
use stealscope_readers::{cpuinfo, RootFs, Source};

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

/// The screen is redrawn this often (and at once after a key or a resize):
/// the bars cover a second, the sparklines move one cell per window.
const FRAME: Duration = Duration::from_millis(100);

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
    // Opened before the terminal is taken over, so errors print plainly.
    // No hardware counters: the IPC rule needs them read with every
    // sample, and a live view need not hold perf groups open.
    let (sched, culprits) = attribution(&a.root);
    let opened = Opened::open(
        SamplerOptions {
            sched,
            ..SamplerOptions::new(&a.root)
        },
        None,
    )?;
    let src = RootFs::new(&a.root);
    let hostname = src.read_value("/proc/sys/kernel/hostname").ok().flatten();
    // Guest steal means something only in a guest (the hypervisor flag;
    // the panel also shows once any steal is counted).
    let guest = cpuinfo::read(&src)
        .ok()
        .flatten()
        .is_some_and(|c| c.has("hypervisor"));
    end_on_signals()?;
    let clk = clk_tck().unwrap_or(DEFAULT_CLK_TCK) as f64;
    let view = Arc::new(SharedView::new(clk));
    let engine = Live::start(
        opened,
        a.rate,
        a.findings_interval,
        ViewFeed::new(view.clone(), a.root.clone(), culprits),
        view.clone(),
    )?;
    let mut terminal = ratatui::try_init()?;
    let screen = Screen {
        view: &view,
        engine: &engine,
        hostname: hostname.as_deref(),
        every: a.findings_interval,
        guest,
    };
    let result = screen.run(&mut terminal);
    ratatui::restore();
    engine.stop();
    result
}

/// Whether to run the scheduler-event collector (who ran while each vCPU
/// waited), and what the VM panel says until it reports: only on the live
/// root (the events are this kernel's) and only when VMs run, since the
/// trace costs every context switch of the machine. Unprivileged, it is
/// still tried, so that the panel says why it could not start.
fn attribution(root: &std::path::Path) -> (bool, String) {
    if root != std::path::Path::new("/") {
        return (
            false,
            "culprits n/a: scheduler events only on --root /".into(),
        );
    }
    let (host, _) = HostTracker::start(root);
    if host.vms().is_empty() {
        return (false, "culprits n/a: no VMs when top started".into());
    }
    (true, "culprits: starting".into())
}

/// On SIGTERM, SIGINT or SIGHUP: restore the terminal and exit 0, from a
/// thread of its own. A flag for the main loop would not do: once the
/// terminal is gone (the SIGHUP case) crossterm's input poll spins and never
/// returns, whatever its timeout (crossterm#793). Holding the stdout lock
/// until the exit keeps the main thread from drawing over the restored
/// screen.
fn end_on_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _out = std::io::stdout().lock();
                // A terminal that is gone cannot be restored: nothing to say.
                let _ = ratatui::try_restore();
                std::process::exit(0);
            }
        })?;
    Ok(())
}

struct Screen<'a> {
    view: &'a SharedView,
    engine: &'a Live,
    hostname: Option<&'a str>,
    every: Duration,
    guest: bool,
}

impl Screen<'_> {
    fn run(&self, terminal: &mut DefaultTerminal) -> Result<(), Error> {
        let mut ui = UiState {
            rate_hz: self.engine.rate_hz(),
            ..Default::default()
        };
        // While paused: the view as it was, and when.
        let mut frozen: Option<(View, Instant)> = None;
        let fail = std::env::var(FAILPOINT_ENV).is_ok_and(|v| v == PANIC_FAILPOINT);
        loop {
            if self.engine.failed() {
                return Err("a sampling thread stopped (see the message above)".into());
            }
            match &frozen {
                Some((view, at)) => self.draw(terminal, view, *at, &ui)?,
                None => {
                    let live = self.view.lock();
                    self.draw(terminal, &live, Instant::now(), &ui)?;
                }
            }
            if fail {
                panic!("failpoint {PANIC_FAILPOINT}");
            }
            let ready = match event::poll(FRAME) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => false,
                r => r?,
            };
            if !ready {
                continue;
            }
            // A resize needs nothing but the redraw at the top of the loop.
            if let Event::Key(k) = event::read()? {
                match keys::handle(k, &mut ui) {
                    keys::Outcome::Quit => return Ok(()),
                    keys::Outcome::PauseChanged => {
                        frozen = ui
                            .paused
                            .then(|| (self.view.lock().clone(), Instant::now()));
                    }
                    keys::Outcome::RateChanged => self.engine.set_rate_hz(ui.rate_hz),
                    keys::Outcome::Continue => {}
                }
            }
        }
    }

    fn draw(
        &self,
        terminal: &mut DefaultTerminal,
        view: &View,
        now: Instant,
        ui: &UiState,
    ) -> Result<(), Error> {
        let input = TopInput {
            hostname: self.hostname,
            windows: &view.windows,
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
        terminal.draw(|f| tui::draw(f, &input))?;
        Ok(())
    }
}
