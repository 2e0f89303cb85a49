//! Signs of life during a sampling interval (doctor, host, snapshot): a
//! line on stderr counting the seconds, only on a terminal and never with
//! --json. The capture and its early end on Ctrl-C are the engine's
//! (`stealscope_engine::report::capture`); this is only the line.

use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Whether to show progress: stderr is a terminal and no JSON is asked for.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// Runs `f` with a tick that shows the seconds elapsed of `total` (when
/// `show`), and clears the line after it if it was drawn.
pub fn shown<T>(show: bool, total: Duration, f: impl FnOnce(&mut dyn FnMut(Duration)) -> T) -> T {
    let total = total.as_secs_f64();
    let mut shown: Option<u64> = None;
    let out = f(&mut |elapsed: Duration| {
        let s = elapsed.as_secs();
        if show && shown != Some(s) {
            shown = Some(s);
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\r\x1b[Ksampling {s} s of {total:.0} s (Ctrl-C: stop now and report what was measured)"
            );
            let _ = err.flush();
        }
    });
    if shown.is_some() {
        eprint!("\r\x1b[K");
    }
    out
}
