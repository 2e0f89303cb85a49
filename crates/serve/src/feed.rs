//! What serve subscribes to the engine with: each sample and host scan
//! updates the metrics state, each rule run its findings; errors go to the
//! service log, each distinct one once.

use crate::facts::Facts;
use crate::log;
use crate::shared::Shared;
use std::sync::Arc;
use stealscope_analysis::{DoctorReport, Severity};
use stealscope_engine::exact_steal_live::LiveExactSteal;
use stealscope_engine::host::HostTracker;
use stealscope_engine::rules::Findings;
use stealscope_engine::{Sample, Subscriber};
use stealscope_model::host::vcpu_times;
use stealscope_model::running_exact_steal::ExactReading;
use stealscope_output::metrics::SchedStatus;
use stealscope_readers::ReadError;
use stealscope_who::SchedSample;

pub(crate) struct Feed {
    pub shared: Arc<Shared>,
    /// Last /proc/stat error printed, so a persistent one is logged once.
    last_error: Option<String>,
    /// The same for the host scan.
    last_host_error: Option<String>,
    /// The collector's latest reading, and the one the counters last
    /// advanced to (at the previous host scan, which names the culprits).
    sched_now: Option<Arc<SchedSample>>,
    sched_counted: Option<Arc<SchedSample>>,
    /// Host and VM facts for the fleet families.
    facts: Facts,
    /// The exact guest steal collector, loaded for the life of serve.
    exact: LiveExactSteal,
}

impl Feed {
    pub fn new(shared: Arc<Shared>, root: std::path::PathBuf) -> Feed {
        Feed {
            shared,
            exact: LiveExactSteal::start(&root),
            facts: Facts::new(root),
            last_error: None,
            last_host_error: None,
            sched_now: None,
            sched_counted: None,
        }
    }

    fn note_host(&mut self, r: Result<(), ReadError>) {
        let msg = r.err().map(|e| format!("host scan: {e}"));
        if msg.is_some() && msg != self.last_host_error {
            log(msg.as_deref().unwrap_or_default());
        }
        self.last_host_error = msg;
    }
}

/// The service log's line for a change of the exact steal route.
fn say_route(r: &ExactReading) {
    match r {
        ExactReading::Running => log("exact steal: the BPF collector runs (stealscope_guest_steal_*)"),
        ExactReading::Unavailable(why) => log(&format!(
            "exact steal is off, steal in 10 ms units only (stealscope_cpu_seconds_total{{mode=\"steal\"}}): {why}"
        )),
        ExactReading::Cpus { .. } | ExactReading::Full { .. } => {}
    }
}

impl Subscriber for Feed {
    fn sample(&mut self, s: Sample<'_>) -> Result<(), ReadError> {
        // Read with the sample, so the exact counters and /proc/stat's
        // are exported as of the same moment.
        let exact = self.exact.poll(s.t_ns);
        exact.iter().for_each(say_route);
        self.shared.update(|m| {
            m.cpu.push(s.t_ns, s.stat.clone());
            if let Some(c) = s.counters {
                m.hw.push(c.clone());
            }
            for r in exact {
                m.exact.apply(r);
            }
        });
        self.shared.mark_sampled();
        self.last_error = None;
        Ok(())
    }

    fn sample_error(&mut self, e: ReadError) -> Result<(), ReadError> {
        let msg = e.to_string();
        if self.last_error.as_ref() != Some(&msg) {
            log(&msg);
        }
        self.last_error = Some(msg);
        self.shared.mark_sampled();
        Ok(())
    }

    fn host_started(&mut self, e: Option<ReadError>) -> Result<(), ReadError> {
        self.note_host(e.map_or(Ok(()), Err));
        Ok(())
    }

    fn host(&mut self, t: u64, h: &HostTracker, r: Result<(), ReadError>) -> Result<(), ReadError> {
        self.note_host(r);
        let vcpus = vcpu_times(h.vms(), h.samples());
        let vm_facts = self.facts.vms(h);
        let host = self.facts.host_due(t);
        let (before, now) = (self.sched_counted.take(), self.sched_now.take());
        self.shared.update(|s| {
            s.vcpus = vcpus;
            s.vm_facts = vm_facts;
            if let Some(host) = host {
                s.host = host;
            }
            match (&before, &now) {
                (Some(b), Some(n)) => s.wait_by.push(b, n, h.vms(), h.samples()),
                (None, Some(_)) => s.wait_by.baseline(h.samples()),
                _ => {}
            }
        });
        self.sched_counted = now.or(before);
        Ok(())
    }

    fn sched(&mut self, r: Result<&Arc<SchedSample>, String>) -> Result<(), ReadError> {
        let status = match r {
            Ok(s) => {
                self.sched_now = Some(s.clone());
                SchedStatus {
                    route: s.route.as_str().into(),
                    reason: String::new(),
                    events: s.stats.events,
                    lost_events: s.stats.lost_events,
                    overflows: s.stats.overflows,
                    unwatched: s.stats.unwatched,
                }
            }
            Err(why) => {
                // Said once by the engine: the log and the info series.
                log(&format!(
                    "who stole it (stealscope_vm_wait_by_seconds_total) is off: {why}"
                ));
                SchedStatus {
                    route: "none".into(),
                    reason: why,
                    ..SchedStatus::default()
                }
            }
        };
        let said = self.shared.state.lock().ok().and_then(|s| s.sched.clone());
        if said.is_none() && status.route != "none" {
            log(&format!(
                "who stole it: scheduler events by the {} route",
                status.route
            ));
        }
        self.shared.update(|s| s.sched = Some(status));
        Ok(())
    }
}

/// The rule runner's side: findings become `stealscope_finding` series
/// until the next run.
pub(crate) struct FindingsFeed(pub Arc<Shared>);

impl Findings for FindingsFeed {
    fn start_failed(&self, e: ReadError) {
        log(&format!("rules: {e}"));
    }

    fn report(&self, r: Result<DoctorReport, ReadError>) {
        match r {
            Ok(report) => {
                let noisy = stealscope_output::metrics_noisy::of(&report.findings);
                let mut f: Vec<(String, Severity)> = report
                    .findings
                    .into_iter()
                    .map(|f| (f.id, f.severity))
                    .collect();
                f.sort();
                f.dedup();
                self.0.update(|s| {
                    s.findings = f;
                    s.noisy = noisy;
                });
            }
            Err(e) => log(&format!("rules: {e}")),
        }
    }
}
