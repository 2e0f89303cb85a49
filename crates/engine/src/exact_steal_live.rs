//! Exact guest steal for the long-running views (issue 30: `serve`, `top`):
//! the guest steal collector loaded for the life of the process, in a
//! thread of its own (its verifier takes ~0.12 s of CPU, which must not
//! delay a sample), then read from the subscriber's sample callback: the
//! per-CPU counters with every sample (one map read), the tasks and
//! episodes about once a second (a walk of the task map, and the
//! episodes drained from the ring before its 4,096 fill). What it read
//! goes to `model::running_exact_steal` as [`ExactReading`]s; why it does
//! not run goes there too, said once.

use std::collections::BTreeMap;
use std::path::Path;
use std::thread::JoinHandle;
use stealscope_model::running_exact_steal::{ExactReading, NO_STEAL_CLOCK};
use stealscope_readers::own_threads;
use stealscope_readers::{process, RootFs};
use stealscope_sched::{GuestSteal, StealOptions};

/// Whole readings (tasks, episodes) at most this often.
pub const FULL_EVERY_NS: u64 = 1_000_000_000;
/// A collector whose steal clock still reads 0 on every CPU this long
/// after it loaded is given up ([`NO_STEAL_CLOCK`]).
pub const CONFIRM_WITHIN_NS: u64 = 2_000_000_000;

/// Why a machine that is no VM does not load it (its programs would run
/// at every context switch for a clock that stays 0).
pub const NOT_A_GUEST: &str =
    "not a guest (no hypervisor CPU flag, no steal in /proc/stat): no steal clock to read";

/// A VM by its CPU flag, or one whose kernel counts steal (as the one-shot
/// capture judges it).
fn is_guest(root: &Path) -> bool {
    let src = RootFs::new(root);
    let flag = stealscope_readers::cpuinfo::read(&src)
        .ok()
        .flatten()
        .is_some_and(|c| c.has("hypervisor"));
    flag || stealscope_readers::stat::read(&src)
        .ok()
        .flatten()
        .is_some_and(|s| s.cpus.iter().any(|c| c.times.steal.unwrap_or(0) > 0))
}

enum State {
    Loading(JoinHandle<Result<GuestSteal, String>>),
    /// Loaded at `since_ns`; no CPU's steal clock seen to move yet.
    Unconfirmed {
        g: Box<GuestSteal>,
        since_ns: u64,
    },
    Running(Box<GuestSteal>),
    /// Said why not (or about to: `unsaid`).
    Gone {
        unsaid: Option<String>,
    },
}

pub struct LiveExactSteal {
    state: State,
    last_full_ns: Option<u64>,
    /// Each victim's process name, read once per pid.
    names: BTreeMap<u32, String>,
}

impl LiveExactSteal {
    /// Starts loading the collector; on any root but the live one it
    /// cannot read this kernel, and says so at the first poll.
    pub fn start(root: &Path) -> LiveExactSteal {
        let state = if root != Path::new("/") {
            gone(Some(
                "exact steal reads the live kernel only (not under --root)".into(),
            ))
        } else if !is_guest(root) {
            gone(Some(NOT_A_GUEST.into()))
        } else {
            State::Loading(
                own_threads::spawn("steal-load", || {
                    GuestSteal::start(StealOptions::default()).map_err(|e| e.reason)
                })
                .expect("spawning a thread"),
            )
        };
        LiveExactSteal {
            state,
            last_full_ns: None,
            names: BTreeMap::new(),
        }
    }

    /// What there is to read at `t_ns` (CLOCK_MONOTONIC), in order.
    pub fn poll(&mut self, t_ns: u64) -> Vec<ExactReading> {
        let mut out = Vec::new();
        if let State::Loading(h) = &self.state {
            if !h.is_finished() {
                return out;
            }
            let State::Loading(h) = std::mem::replace(&mut self.state, gone(None)) else {
                unreachable!("matched above")
            };
            self.state = match h.join() {
                Ok(Ok(g)) => State::Unconfirmed {
                    g: Box::new(g),
                    since_ns: t_ns,
                },
                Ok(Err(why)) => gone(Some(why)),
                Err(_) => gone(Some("the collector's loader panicked".into())),
            };
        }
        match &mut self.state {
            State::Loading(_) => {}
            State::Gone { unsaid } => out.extend(unsaid.take().map(ExactReading::Unavailable)),
            State::Unconfirmed { g, since_ns } => {
                let since = *since_ns;
                match g.read_cpus() {
                    Ok(cpus) if cpus.iter().any(|c| c.steal_clock_ns > 0) => {
                        out.push(ExactReading::Running);
                        let State::Unconfirmed { g, .. } =
                            std::mem::replace(&mut self.state, gone(None))
                        else {
                            unreachable!("matched above")
                        };
                        self.state = State::Running(g);
                        out.extend(self.running(t_ns));
                    }
                    Ok(_) if t_ns.saturating_sub(since) < CONFIRM_WITHIN_NS => {}
                    Ok(_) => self.fail(&mut out, NO_STEAL_CLOCK.into()),
                    Err(e) => self.fail(&mut out, e.to_string()),
                }
            }
            State::Running(_) => out.extend(self.running(t_ns)),
        }
        out
    }

    fn fail(&mut self, out: &mut Vec<ExactReading>, why: String) {
        self.state = gone(None);
        out.push(ExactReading::Unavailable(why));
    }

    /// The counters, or a whole reading when one is due; a read that fails
    /// ends the collector, said once.
    fn running(&mut self, t_ns: u64) -> Option<ExactReading> {
        let State::Running(g) = &mut self.state else {
            return None;
        };
        let due = self
            .last_full_ns
            .is_none_or(|t| t_ns.saturating_sub(t) >= FULL_EVERY_NS);
        let r = if due {
            self.last_full_ns = Some(t_ns);
            g.read().map(|sample| {
                let processes = self.name(&sample);
                ExactReading::Full { sample, processes }
            })
        } else {
            g.read_cpus().map(|cpus| ExactReading::Cpus { t_ns, cpus })
        };
        Some(r.unwrap_or_else(|e| {
            self.state = gone(None);
            ExactReading::Unavailable(format!("the exact steal collector stopped: {e}"))
        }))
    }

    /// Process names of the sample's victims: read once per pid, and
    /// forgotten when it no longer appears in the collector's map.
    fn name(&mut self, s: &stealscope_who::GuestStealSample) -> BTreeMap<u32, String> {
        let proc = RootFs::new("/");
        let pids: std::collections::BTreeSet<u32> = s
            .tasks
            .iter()
            .map(|t| t.task.tgid)
            .chain(s.episodes.iter().filter_map(|e| match &e.victim {
                stealscope_who::StealVictim::Task(t) => Some(t.tgid),
                stealscope_who::StealVictim::Idle => None,
            }))
            .collect();
        self.names.retain(|pid, _| pids.contains(pid));
        for pid in pids {
            if let std::collections::btree_map::Entry::Vacant(e) = self.names.entry(pid) {
                if let Ok(Some(comm)) = process::comm(&proc, pid) {
                    e.insert(comm);
                }
            }
        }
        self.names.clone()
    }
}

fn gone(unsaid: Option<String>) -> State {
    State::Gone { unsaid }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use stealscope_readers::clock::monotonic_ns;

    #[test]
    fn under_a_root_it_says_why_once() {
        let mut l = LiveExactSteal::start(Path::new("/tmp"));
        assert_eq!(
            l.poll(1),
            [ExactReading::Unavailable(
                "exact steal reads the live kernel only (not under --root)".into()
            )]
        );
        assert!(l.poll(2).is_empty(), "said once");
    }

    /// On this machine: the collector either runs (counters each poll, a
    /// whole reading about once a second) or says once why not, as
    /// loading it directly does.
    #[test]
    fn live_it_runs_or_says_why_once() {
        let mut l = LiveExactSteal::start(Path::new("/"));
        let mut got = Vec::new();
        let end = monotonic_ns() + 3 * CONFIRM_WITHIN_NS;
        while monotonic_ns() < end {
            got.extend(l.poll(monotonic_ns()));
            std::thread::sleep(Duration::from_millis(20));
        }
        let said: Vec<&ExactReading> = got
            .iter()
            .filter(|r| matches!(r, ExactReading::Running | ExactReading::Unavailable(_)))
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        if *said[0] == ExactReading::Running {
            let full = got
                .iter()
                .filter(|r| matches!(r, ExactReading::Full { .. }))
                .count();
            let cpus = got
                .iter()
                .filter(|r| matches!(r, ExactReading::Cpus { .. }))
                .count();
            // Up for at most ~6 s: a whole reading a second, counters at
            // every other poll.
            assert!((1..=7).contains(&full), "{full} whole readings");
            assert!(cpus > 10 * full, "{cpus} counter readings");
        } else if is_guest(Path::new("/")) {
            let direct = GuestSteal::start(StealOptions::default());
            assert!(
                direct.is_err()
                    || matches!(said[0], ExactReading::Unavailable(r) if r == NO_STEAL_CLOCK),
                "{said:?}"
            );
        }
    }
}
