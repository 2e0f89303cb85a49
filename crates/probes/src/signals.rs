//! Ctrl-C / SIGTERM: the handler only sets a flag (async-signal-safe); the
//! probe threads see it within one interval and return, and the guards
//! restore the system as they drop.

use crate::error::ProbeError;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A stop flag set by SIGINT, SIGTERM or SIGHUP, to pass to the probes' `run`.
/// A second signal while the flag is already set exits at once (status 130):
/// the kernel still drops the PM QoS request and our threads with the
/// process, and the next probe removes a tracing instance left behind.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, ProbeError> {
    let flag = Arc::new(AtomicBool::new(false));
    let err = |sig: i32, e: std::io::Error| {
        ProbeError::sys(
            format!("install handler for signal {sig}"),
            nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)),
        )
    };
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        // Order matters: the conditional exit sees the flag as it was before
        // this signal, so only a second signal exits.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))
            .map_err(|e| err(sig, e))?;
        signal_hook::flag::register(sig, Arc::clone(&flag)).map_err(|e| err(sig, e))?;
    }
    Ok(flag)
}
