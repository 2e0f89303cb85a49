//! The per-CPU thread harness every probe runs on: one named, small-stack
//! thread per CPU, pinned before it does anything else, all released at once
//! through a [`StartGate`] after the coordinator finished its own setup, and
//! joined with one error path (a failed setup, a failed spawn or a panic).
//!
//! The probe supplies the thread body (its own preparation, then
//! `ctx.start()`, then the measurement) and the coordinator (what it does
//! between "every thread is ready" and "every thread is done": lock memory,
//! take the first counter sample, open the gate, poll).

use crate::error::ProbeError;
use crate::sys::{self, StartGate};
use std::sync::Mutex;
use std::time::Duration;

/// Stack of a probe thread: small, so that locking all memory stays cheap.
const STACK: usize = 256 * 1024;

/// What a probe thread sees of the harness.
pub(crate) struct ThreadCtx<'a> {
    gate: &'a StartGate,
    error: &'a Mutex<Option<ProbeError>>,
}

impl ThreadCtx<'_> {
    /// Waits for the start signal: true = go, false = the run was aborted
    /// (another thread failed its setup), return None.
    pub fn start(&self) -> bool {
        self.gate.arrive_and_wait()
    }

    /// Records an error that fails the whole run.
    pub fn fail(&self, e: ProbeError) {
        *self.error.lock().unwrap() = Some(e);
    }
}

/// What the coordinator sees: open the gate, then optionally poll until
/// every thread has returned.
pub(crate) struct Control<'a, 's> {
    gate: &'a StartGate,
    handles: &'a [std::thread::ScopedJoinHandle<'s, ()>],
}

impl Control<'_, '_> {
    /// Releases the threads (call once the coordinator's setup is done).
    pub fn open(&self) {
        self.gate.open();
    }

    /// Sleeps `every`, then calls `tick`, until all threads have finished.
    pub fn poll(&self, every: Duration, mut tick: impl FnMut()) {
        while !self.handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(every);
            tick();
        }
    }
}

/// Runs `body(cpu, ctx)` on one thread per CPU (named `{name}/{cpu}`,
/// pinned to that CPU) and `coordinate(control)` on the calling thread once
/// every thread is ready. Returns each thread's result in the order of
/// `cpus`, or the first error: a pin or spawn failure, an error a thread
/// recorded with [`ThreadCtx::fail`], or a thread that panicked.
pub(crate) fn run_per_cpu<T, B, C>(
    name: &str,
    cpus: &[u32],
    body: B,
    coordinate: C,
) -> Result<Vec<T>, ProbeError>
where
    T: Send,
    B: Fn(u32, &ThreadCtx) -> Option<T> + Sync,
    C: FnOnce(&Control),
{
    let gate = StartGate::default();
    let error: Mutex<Option<ProbeError>> = Mutex::new(None);
    let slots: Vec<Mutex<Option<T>>> = cpus.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (&cpu, slot) in cpus.iter().zip(&slots) {
            let ctx = ThreadCtx {
                gate: &gate,
                error: &error,
            };
            let body = &body;
            let h = std::thread::Builder::new()
                .name(format!("{name}/{cpu}"))
                .stack_size(STACK)
                .spawn_scoped(s, move || {
                    if let Err(e) = sys::pin_current_thread(cpu) {
                        ctx.fail(e);
                        ctx.start();
                        return;
                    }
                    let out = body(cpu, &ctx);
                    *slot.lock().unwrap() = out;
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    *error.lock().unwrap() = Some(ProbeError::spawn(cpu, e));
                    break;
                }
            }
        }
        if gate.settle(handles.len(), cpus.len(), || {
            error.lock().unwrap().is_some()
        }) {
            coordinate(&Control {
                gate: &gate,
                handles: &handles,
            });
            // A coordinator that forgot to open must not hang the threads.
            gate.open();
        }
        for h in handles {
            let _ = h.join();
        }
    });
    if let Some(e) = error.into_inner().unwrap() {
        return Err(e);
    }
    let outs: Vec<T> = slots
        .into_iter()
        .filter_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    if outs.len() != cpus.len() {
        return Err(ProbeError::Thread("a probe thread panicked".into()));
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_runs_pinned_on_its_cpu_and_results_keep_order() {
        let _serial = crate::test_lock();
        let cpus = crate::resolve_cpus(None).unwrap();
        let mut opened = false;
        let out = run_per_cpu(
            "ss-test",
            &cpus,
            |cpu, ctx| {
                if !ctx.start() {
                    return None;
                }
                // SAFETY: sched_getcpu has no memory effects.
                let on = unsafe { libc::sched_getcpu() };
                Some((cpu, on))
            },
            |control| {
                opened = true;
                control.open();
            },
        )
        .unwrap();
        assert!(opened);
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), cpus);
        assert!(out.iter().all(|&(cpu, on)| on == cpu as i32), "{out:?}");
    }

    #[test]
    fn a_failing_thread_fails_the_run() {
        let _serial = crate::test_lock();
        let cpus = crate::resolve_cpus(None).unwrap();
        let r = run_per_cpu(
            "ss-test",
            &cpus,
            |cpu, ctx| {
                if !ctx.start() {
                    return None;
                }
                if cpu == cpus[0] {
                    ctx.fail(ProbeError::Options("boom".into()));
                }
                Some(())
            },
            |control| control.open(),
        );
        assert!(matches!(r, Err(ProbeError::Options(m)) if m == "boom"));
        // A pin that cannot succeed aborts every thread before the start.
        let r = run_per_cpu(
            "ss-test",
            &[u32::MAX / 2],
            |_, _| Some(()),
            |_| panic!("the coordinator must not run"),
        );
        assert!(r.is_err());
    }
}
