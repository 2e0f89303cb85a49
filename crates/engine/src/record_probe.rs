//! The wakeup probe beside a recording: one run per window in a thread of
//! its own, each window's figures per CPU handed to the recorder as
//! [`ProbeRecord`]s.

use crate::capture::monotonic_ns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;
use stealscope_probes::wakeup;
use stealscope_readers::own_threads;
use stealscope_readers::recording::ProbeRecord;

/// Probe windows measured beside the recorder (in another thread).
pub trait ProbeSource {
    /// Windows finished since the last call, and what the probe had to say
    /// (no real-time priority, an error that ended it).
    fn drain(&mut self, out: &mut Vec<ProbeRecord>, notes: &mut Vec<String>);
    /// Ends the measurement, waiting for its last (partial) window.
    fn stop(&mut self);
}

/// The wakeup probe in a recording: a deadline every 5 ms per CPU (200
/// wake-ups a second), a tenth of cyclictest's default rate.
const PROBE_INTERVAL: Duration = Duration::from_millis(5);
const PROBE_WINDOW: Duration = Duration::from_secs(1);

/// A window's records per CPU and the probe's notes, or why it stopped.
type WindowResult = Result<(Vec<ProbeRecord>, Vec<String>), String>;

/// One window per CPU of a wakeup run.
fn windows_of(rep: &wakeup::WakeupReport, start_ns: u64, wall_ns: u64) -> Vec<ProbeRecord> {
    rep.cpus
        .iter()
        .map(|c| ProbeRecord {
            probe: "wakeup".into(),
            cpu: c.stats.cpu,
            start_ns,
            wall_ns,
            samples: c.stats.samples,
            p50_ns: ns(c.stats.p50_us),
            p99_ns: ns(c.stats.p99_us),
            max_ns: ns(c.stats.max_us),
            buckets: c
                .stats
                .buckets
                .iter()
                .map(|b| (ns(b.le_us), b.count))
                .collect(),
        })
        .collect()
}

/// The wakeup probe in its own thread, one run per window.
pub struct WakeupWindows {
    stop: Arc<AtomicBool>,
    rx: Receiver<WindowResult>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Notes already passed on (the same ones come with every window).
    noted: Vec<String>,
}

fn ns(us: f64) -> u64 {
    (us * 1000.0).round().max(0.0) as u64
}

impl WakeupWindows {
    pub fn start(stop_all: Arc<AtomicBool>) -> WakeupWindows {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = channel();
        let own = Arc::clone(&stop);
        let thread = own_threads::spawn("probe", move || {
            let opts = wakeup::WakeupOptions {
                duration: PROBE_WINDOW,
                interval: PROBE_INTERVAL,
                ..Default::default()
            };
            while !own.load(Ordering::Relaxed) && !stop_all.load(Ordering::Relaxed) {
                let start_ns = monotonic_ns();
                let r = wakeup::run(&opts, &own).map_err(|e| e.to_string());
                let wall_ns = monotonic_ns() - start_ns;
                let failed = r.is_err();
                let msg = r.map(|rep| (windows_of(&rep, start_ns, wall_ns), rep.notes));
                if tx.send(msg).is_err() || failed {
                    return;
                }
            }
        })
        .expect("spawning a thread");
        WakeupWindows {
            stop,
            rx,
            thread: Some(thread),
            noted: Vec::new(),
        }
    }
}

impl ProbeSource for WakeupWindows {
    fn drain(&mut self, out: &mut Vec<ProbeRecord>, notes: &mut Vec<String>) {
        while let Ok(r) = self.rx.try_recv() {
            let new_notes = match r {
                Ok((w, n)) => {
                    out.extend(w);
                    n
                }
                Err(e) => vec![format!("probe wakeup stopped: {e}")],
            };
            for n in new_notes {
                if !self.noted.contains(&n) {
                    notes.push(format!("probe wakeup: {n}"));
                    self.noted.push(n);
                }
            }
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
