//! stealscope's own threads, counted when they end: a thread that ended
//! is gone from /proc/self/task, and with it its run time and run-queue
//! wait (schedstat), so a capture that joined a starved helper thread
//! could not see why it overran (2026-12-06: 48.6 s for 4 s asked, 3.4 s
//! of wait found, beside a pinned nice -20 loop in the same autogroup).
//! Every thread of the tool is spawned through [`spawn`], which adds its
//! schedstat to [`ended`] as it ends (a panic included).

use crate::process::parse_schedstat;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

static RUN_NS: AtomicU64 = AtomicU64::new(0);
static WAIT_NS: AtomicU64 = AtomicU64::new(0);

/// Adds the calling thread's schedstat to the ended totals when dropped.
struct CountOnExit;

impl Drop for CountOnExit {
    fn drop(&mut self) {
        let path = "/proc/thread-self/schedstat";
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        if let Ok(s) = parse_schedstat(&text, path) {
            RUN_NS.fetch_add(s.run_ns, Ordering::Relaxed);
            WAIT_NS.fetch_add(s.wait_ns, Ordering::Relaxed);
        }
    }
}

/// A named thread of the tool's own, counted in [`ended`] when it ends.
pub fn spawn<F, T>(name: &str, f: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let _count = CountOnExit;
            f()
        })
}

/// Run and run-queue wait (ns) of the tool's threads that have ended.
pub fn ended() -> (u64, u64) {
    (
        RUN_NS.load(Ordering::Relaxed),
        WAIT_NS.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_threads_run_time_is_counted() {
        let (run0, _) = ended();
        let t = spawn("busy", || {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_millis(30) {
                std::hint::spin_loop();
            }
            // Its own reading, just before it ends (what it ran so far).
            let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
            parse_schedstat(&text, "schedstat").unwrap().run_ns
        })
        .unwrap();
        let ran = t.join().unwrap();
        let (run1, _) = ended();
        // Other tests' threads may add theirs; none takes any away.
        assert!(
            ran > 0 && run1 - run0 >= ran,
            "{} ns vs {ran} ns",
            run1 - run0
        );
    }
}
