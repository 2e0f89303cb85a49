//! The loop of `stealscope top`'s screen: draw, wait for a key or a
//! resize (at most a frame), act on it. What is drawn comes from a
//! [`Screen`] the caller implements over its live data, so this crate needs
//! no engine. The terminal is restored on every way out: q, Esc or Ctrl-C
//! (the loop returns), SIGTERM, SIGINT or SIGHUP ([`end_on_signals`]), an
//! error, and a panic (the hook ratatui installs).

use super::keys::{self, Outcome};
use super::UiState;
use ratatui::crossterm::event::{self, Event};
use ratatui::{DefaultTerminal, Frame};
use std::io;
use std::time::Duration;

/// The screen is redrawn this often (and at once after a key or a resize):
/// the bars cover a second, the sparklines move one cell per window.
pub const FRAME: Duration = Duration::from_millis(100);

/// What the loop draws and steers.
pub trait Screen {
    /// Why the loop must end (a sampling thread stopped), if it must.
    fn failed(&self) -> Option<String>;
    /// Draws one frame: the live data, or the copy kept while paused.
    fn draw(&mut self, f: &mut Frame, ui: &UiState);
    /// The user paused (keep a copy of the data as it is now) or resumed.
    fn pause(&mut self, paused: bool);
    fn set_rate_hz(&mut self, hz: f64);
}

/// Runs until the user quits. `panic_after_first_frame` is a test
/// failpoint: the test sees the terminal restored by the panic hook.
pub fn run(
    terminal: &mut DefaultTerminal,
    screen: &mut dyn Screen,
    mut ui: UiState,
    panic_after_first_frame: Option<&str>,
) -> io::Result<()> {
    loop {
        if let Some(why) = screen.failed() {
            return Err(io::Error::other(why));
        }
        terminal.draw(|f| screen.draw(f, &ui))?;
        if let Some(name) = panic_after_first_frame {
            panic!("failpoint {name}");
        }
        let ready = match event::poll(FRAME) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
            r => r?,
        };
        if !ready {
            continue;
        }
        // A resize needs nothing but the redraw at the top of the loop.
        if let Event::Key(k) = event::read()? {
            match keys::handle(k, &mut ui) {
                Outcome::Quit => return Ok(()),
                Outcome::PauseChanged => screen.pause(ui.paused),
                Outcome::RateChanged => screen.set_rate_hz(ui.rate_hz),
                Outcome::Continue => {}
            }
        }
    }
}

/// On SIGTERM, SIGINT or SIGHUP: restore the terminal and exit 0, from a
/// thread of its own. A flag for the main loop would not do: once the
/// terminal is gone (the SIGHUP case) crossterm's input poll spins and never
/// returns, whatever its timeout (crossterm#793). Holding the stdout lock
/// until the exit keeps the main thread from drawing over the restored
/// screen.
pub fn end_on_signals() -> io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _out = io::stdout().lock();
                // A terminal that is gone cannot be restored: nothing to say.
                let _ = ratatui::try_restore();
                std::process::exit(0);
            }
        })?;
    Ok(())
}
