//! The live end of exact guest steal (issue 30): loads the guest steal
//! collector in a thread of its own when the capture starts (loading and
//! verifying its programs takes ~0.12 s of CPU, which must not delay the
//! first sample), reads it as soon as it is up, and at the end stores what
//! accrued since, or why there is none, in the end side
//! ([`stealscope_model::exact_steal::EXACT_STEAL_FILE`]). Its span starts
//! when it is up, so its percentages are over its own span, not the
//! interval's.

use std::thread::JoinHandle;
use stealscope_model::exact_steal::{ExactSteal, StoredExactSteal, EXACT_STEAL_FILE};
use stealscope_readers::own_threads;
use stealscope_readers::MemFs;
use stealscope_sched::{GuestSteal, StealOptions};
use stealscope_who::{GuestStealSample, StealEpisode};

type Loaded = Result<(GuestSteal, GuestStealSample), String>;

pub struct ExactStealHook {
    loading: JoinHandle<Loaded>,
}

impl ExactStealHook {
    /// Starts loading the collector; its first reading is taken the moment
    /// it is up.
    pub fn spawn() -> ExactStealHook {
        ExactStealHook {
            loading: own_threads::spawn("steal-load", || {
                let mut g = GuestSteal::start(StealOptions::default()).map_err(|e| e.reason)?;
                let first = g.read().map_err(|e| e.to_string())?;
                Ok((g, first))
            })
            .expect("spawning a thread"),
        }
    }

    /// What accrued since the first reading (waiting for the load if it is
    /// not done yet): call right before reading the end side, then [`put`]
    /// it there.
    pub fn finish(self) -> StoredExactSteal {
        match self.loading.join() {
            Ok(Ok((mut g, first))) => measured(&mut g, &first),
            Ok(Err(reason)) => StoredExactSteal::Unavailable { reason },
            Err(_) => StoredExactSteal::Unavailable {
                reason: "the collector's loader panicked".into(),
            },
        }
    }
}

/// Stores a reading in a snapshot side.
pub fn put(side: &mut MemFs, stored: &StoredExactSteal) {
    side.insert(
        EXACT_STEAL_FILE,
        serde_json::to_vec(stored).unwrap_or_default(),
    );
}

fn measured(g: &mut GuestSteal, first: &GuestStealSample) -> StoredExactSteal {
    measured_keeping(g, first, None)
}

/// What accrued since `first`, the episodes the reading drains also
/// copied to `out` (`record` keeps every one).
pub(crate) fn measured_keeping(
    g: &mut GuestSteal,
    first: &GuestStealSample,
    out: Option<&mut Vec<StealEpisode>>,
) -> StoredExactSteal {
    let end = match g.read_into(out) {
        Ok(s) => s,
        Err(e) => {
            return StoredExactSteal::Unavailable {
                reason: e.to_string(),
            }
        }
    };
    // A guest without paravirt steal time has a steal clock that never
    // moved since boot: zero is then not a measurement.
    if end.cpus.iter().all(|c| c.steal_clock_ns == 0) {
        return StoredExactSteal::Unavailable {
            reason: stealscope_model::running_exact_steal::NO_STEAL_CLOCK.into(),
        };
    }
    let span_s = end.monotonic_ns.saturating_sub(first.monotonic_ns) as f64 / 1e9;
    let d = end.since(first);
    let mut e = ExactSteal::of(&d, span_s, end.episodes_unlisted(first));
    e.readings_ns = Some((first.monotonic_ns, end.monotonic_ns));
    // Victims are processes (their threads' comms are kept beside).
    let proc = stealscope_readers::RootFs::new("/");
    e.name_processes(|pid| stealscope_readers::process::comm(&proc, pid).ok().flatten());
    StoredExactSteal::Measured(e)
}
