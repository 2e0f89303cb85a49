//! What each key does to the view.

use super::UiState;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The rates + and - step through (Hz); --rate may start between them.
pub const RATES_HZ: [f64; 11] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    /// The user chose to quit.
    Quit,
    /// Pause was switched: take or drop the frozen copy.
    PauseChanged,
    /// The sampling rate changed.
    RateChanged,
}

pub fn faster(hz: f64) -> f64 {
    RATES_HZ.iter().copied().find(|r| *r > hz).unwrap_or(hz)
}

pub fn slower(hz: f64) -> f64 {
    RATES_HZ
        .iter()
        .rev()
        .copied()
        .find(|r| *r < hz)
        .unwrap_or(hz)
}

pub fn handle(key: KeyEvent, ui: &mut UiState) -> Outcome {
    // Key releases and repeats (kitty protocol) are not presses.
    if key.kind == KeyEventKind::Release {
        return Outcome::Continue;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    match key.code {
        KeyCode::Char('c') if ctrl => Outcome::Quit,
        KeyCode::Char('q') | KeyCode::Esc => Outcome::Quit,
        KeyCode::Char('?') | KeyCode::Char('h') => {
            ui.help = !ui.help;
            Outcome::Continue
        }
        KeyCode::Char('p') => {
            ui.paused = !ui.paused;
            Outcome::PauseChanged
        }
        KeyCode::Char('+') | KeyCode::Char('=') => {
            ui.rate_hz = faster(ui.rate_hz);
            Outcome::RateChanged
        }
        KeyCode::Char('-') | KeyCode::Char('_') => {
            ui.rate_hz = slower(ui.rate_hz);
            Outcome::RateChanged
        }
        KeyCode::Char('s') => {
            ui.sort = ui.sort.next();
            Outcome::Continue
        }
        _ => Outcome::Continue,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::VmSort;

    fn key(c: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(c, m)
    }

    #[test]
    fn keys_change_the_view() {
        let mut ui = UiState::default();
        let none = KeyModifiers::NONE;
        assert_eq!(
            handle(key(KeyCode::Char('q'), none), &mut ui),
            Outcome::Quit
        );
        assert_eq!(handle(key(KeyCode::Esc, none), &mut ui), Outcome::Quit);
        let ctrl_c = key(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(handle(ctrl_c, &mut ui), Outcome::Quit);
        assert_eq!(
            handle(key(KeyCode::Char('c'), none), &mut ui),
            Outcome::Continue
        );
        handle(key(KeyCode::Char('?'), none), &mut ui);
        assert!(ui.help);
        handle(key(KeyCode::Char('h'), none), &mut ui);
        assert!(!ui.help);
        assert_eq!(
            handle(key(KeyCode::Char('p'), none), &mut ui),
            Outcome::PauseChanged
        );
        assert!(ui.paused);
        handle(key(KeyCode::Char('s'), none), &mut ui);
        assert_eq!(ui.sort, VmSort::Run);
        handle(key(KeyCode::Char('+'), none), &mut ui);
        assert_eq!(ui.rate_hz, 20.0);
        handle(key(KeyCode::Char('-'), none), &mut ui);
        handle(key(KeyCode::Char('-'), none), &mut ui);
        assert_eq!(ui.rate_hz, 5.0);
        let mut release = key(KeyCode::Char('q'), none);
        release.kind = KeyEventKind::Release;
        assert_eq!(handle(release, &mut ui), Outcome::Continue);
    }

    #[test]
    fn rates_step_along_the_ladder_and_stop_at_its_ends() {
        assert_eq!(faster(10.0), 20.0);
        assert_eq!(faster(7.0), 10.0);
        assert_eq!(slower(7.0), 5.0);
        assert_eq!(faster(1000.0), 1000.0);
        assert_eq!(slower(0.5), 0.5);
        assert_eq!(slower(0.2), 0.2);
    }
}
