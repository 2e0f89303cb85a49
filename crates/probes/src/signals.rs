//! Ctrl-C / SIGTERM: the handler only sets a flag (async-signal-safe); the
//! probe threads see it within one interval and return, and the guards
//! restore the system as they drop.

use crate::error::ProbeError;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A stop flag set by SIGINT, SIGTERM or SIGHUP, to pass to the probes' `run`.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, ProbeError> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&flag)).map_err(|e| {
            ProbeError::sys(
                format!("install handler for signal {sig}"),
                nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })?;
    }
    Ok(flag)
}
