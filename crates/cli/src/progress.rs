//! Signs of life during a sampling interval (doctor, host, snapshot): a
//! line on stderr counting the seconds, only on a terminal and never with
//! --json, and Ctrl-C ending the interval early with a report of what was
//! measured (a second Ctrl-C exits at once, status 130).

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;
use stealscope_engine::capture::{capture_watched, CaptureOptions};
use stealscope_engine::host::HostLiveOptions;
use stealscope_readers::snapshot::Snapshot;

type Error = Box<dyn std::error::Error>;

/// A capture, and how long it ran when Ctrl-C ended it early.
pub struct Captured {
    pub snapshot: Snapshot,
    pub stopped_after: Option<Duration>,
}

impl Captured {
    /// The note a report carries when the interval was cut short.
    pub fn note(&self, asked: Duration) -> Option<String> {
        self.stopped_after.map(|d| {
            format!(
                "sampling ended early (Ctrl-C) after {:.1} s of the {:.1} s asked for: figures cover that time",
                d.as_secs_f64(),
                asked.as_secs_f64()
            )
        })
    }
}

/// Whether to show progress: stderr is a terminal and no JSON is asked for.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

pub fn capture(
    opts: &CaptureOptions,
    host: &HostLiveOptions,
    show: bool,
) -> Result<Captured, Error> {
    let stop = stealscope_probes::signals::stop_on_signals()?;
    let total = opts.interval.as_secs_f64();
    let mut shown: Option<u64> = None;
    let mut stopped_after = None;
    let mut tick = |elapsed: Duration| {
        if stop.load(Ordering::Relaxed) {
            stopped_after.get_or_insert(elapsed);
            return false;
        }
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
        true
    };
    let snapshot = capture_watched(opts, host, &mut tick);
    if show {
        eprint!("\r\x1b[K");
    }
    Ok(Captured {
        snapshot: snapshot?,
        stopped_after,
    })
}
