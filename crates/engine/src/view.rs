//! What a live view (top) is shown: the recent windows, the VMs with their
//! vCPUs, wait history and culprits, the latest findings ([`View`], copied
//! whole when the user pauses). The engine's threads fill it; the screen
//! only copies or draws it. One mutex; every holder only copies, pushes or
//! draws.

use crate::exact_steal_live::LiveExactSteal;
use crate::host::starve::{StarveWatch, RECHECK_EVERY};
use crate::host::HostTracker;
use crate::rules::Findings;
use crate::sampler::{Sample, Subscriber};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use stealscope_analysis::rules::host_starved;
use stealscope_analysis::{DoctorReport, Finding};
use stealscope_model::host::discovery::ThreadRole;
use stealscope_model::host::starve::StoredStarve;
use stealscope_model::host::{LiveHost, Placement};
use stealscope_model::recent::RecentWindows;
use stealscope_model::running_exact_steal::RunningExactSteal;
use stealscope_readers::process::{task_cpu, task_status};
use stealscope_readers::{cpulist, ReadError, RootFs};
use stealscope_who::SchedSample;

/// Windows kept: wider than the sparkline of any usual terminal, and a
/// second of bars even at 1000 Hz; about 90 bytes per CPU each.
pub const HISTORY: usize = 1024;
/// Host scans of wait history kept per VM and vCPU (one a second: 8.5 min).
pub const HOST_HISTORY: usize = 512;

#[derive(Clone)]
pub struct View {
    pub windows: RecentWindows,
    /// Per VM and vCPU: wait, run, placement, history, culprits.
    pub vms: LiveHost,
    /// A host scan has found a VM at some point: show the VM table.
    pub host: bool,
    pub findings: Vec<Finding>,
    pub findings_at: Option<Instant>,
    pub findings_error: Option<String>,
    /// The latest sampling error, shown until a sample succeeds.
    pub sample_error: Option<String>,
    /// The latest host scan's error, if it had one.
    pub host_error: Option<String>,
    /// Whether culprits are attributed, and by which route or why not.
    pub culprits: String,
    /// Exact guest steal from the BPF collector, or why there is none.
    pub exact: RunningExactSteal,
}

pub struct SharedView(Mutex<View>);

impl SharedView {
    pub fn new(clk_tck: f64) -> SharedView {
        SharedView(Mutex::new(View {
            windows: RecentWindows::new(clk_tck, HISTORY),
            vms: LiveHost::new(HOST_HISTORY),
            host: false,
            findings: Vec::new(),
            findings_at: None,
            findings_error: None,
            sample_error: None,
            host_error: None,
            culprits: "culprits: off".into(),
            exact: RunningExactSteal::default(),
        }))
    }

    pub fn lock(&self) -> MutexGuard<'_, View> {
        // A panicked holder leaves plain data behind: keep showing it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sampler's side of a view.
pub struct ViewFeed {
    view: std::sync::Arc<SharedView>,
    root: PathBuf,
    /// The collector's latest reading: the one taken with the next scan.
    sched: Option<Arc<SchedSample>>,
    /// Open waits, shown as `host.starved` as soon as one passes a second
    /// (the rule runner's interval is too late for that): live root only.
    starve: Option<StarveWatch>,
    starve_polled: Option<Instant>,
    /// VM names by pid, from the last host scan.
    vm_names: Vec<(u32, String)>,
    /// The exact guest steal collector, loaded while the view runs.
    exact: LiveExactSteal,
}

impl ViewFeed {
    /// `culprits`: what the view says about attribution until the
    /// collector reports (why it is off, or that it is starting).
    pub fn new(view: std::sync::Arc<SharedView>, root: PathBuf, culprits: String) -> ViewFeed {
        view.lock().culprits = culprits;
        let starve = (root == std::path::Path::new("/"))
            .then(|| StarveWatch::start(&root).ok())
            .flatten();
        ViewFeed {
            view,
            exact: LiveExactSteal::start(&root),
            root,
            sched: None,
            starve,
            starve_polled: None,
            vm_names: Vec::new(),
        }
    }

    /// Puts the scanner's open waits into the view's findings, at most
    /// every [`RECHECK_EVERY`] (as often as the scanner learns anything).
    fn poll_starve(&mut self, now: Instant) {
        let Some(w) = &self.starve else {
            return;
        };
        if self
            .starve_polled
            .is_some_and(|t| now.saturating_duration_since(t) < RECHECK_EVERY)
        {
            return;
        }
        self.starve_polled = Some(now);
        let reading = StoredStarve {
            waits: w.open_now(),
            ..Default::default()
        };
        let names = &self.vm_names;
        let vm_of = |pid: u32| {
            names
                .iter()
                .find(|(p, _)| *p == pid)
                .map(|(_, n)| n.clone())
        };
        let live = host_starved::starved_finding(&reading, &vm_of);
        let mut v = self.view.lock();
        let had = v.findings.iter().any(|f| f.id == STARVED);
        if live.is_none() && !had {
            return;
        }
        v.findings.retain(|f| f.id != STARVED);
        v.findings.extend(live);
        rank(&mut v.findings);
    }
}

const STARVED: &str = "host.starved";

/// Most severe first, then by id (as the doctor's report ranks them).
fn rank(f: &mut [Finding]) {
    f.sort_by(|a, b| b.severity.cmp(&a.severity).then_with(|| a.id.cmp(&b.id)));
}

/// Where each vCPU thread of the scan runs (two small reads per vCPU).
fn placements(root: &std::path::Path, h: &HostTracker) -> Vec<(u32, Placement)> {
    let src = RootFs::new(root);
    h.samples()
        .iter()
        .filter(|s| matches!(s.role, ThreadRole::Vcpu(_)))
        .map(|s| {
            let cpu = task_cpu(&src, s.pid, s.tid).ok().flatten();
            let affinity = task_status(&src, s.pid, s.tid)
                .ok()
                .flatten()
                .and_then(|st| st.cpus_allowed)
                .map(|c| cpulist::format(&c));
            (s.tid, Placement { cpu, affinity })
        })
        .collect()
}

fn host_error(e: ReadError) -> String {
    format!("host scan: {e}")
}

impl Subscriber for ViewFeed {
    fn sample(&mut self, s: Sample<'_>) -> Result<(), ReadError> {
        let exact = self.exact.poll(s.t_ns);
        {
            let mut v = self.view.lock();
            v.windows.push(s.t_ns, s.stat.clone());
            v.sample_error = None;
            for r in exact {
                v.exact.apply(r);
            }
        }
        self.poll_starve(s.now);
        Ok(())
    }

    fn tick(&mut self, now: Instant) -> Result<(), ReadError> {
        self.poll_starve(now);
        Ok(())
    }

    fn sample_error(&mut self, e: ReadError) -> Result<(), ReadError> {
        self.view.lock().sample_error = Some(e.to_string());
        Ok(())
    }

    fn host_started(&mut self, e: Option<ReadError>) -> Result<(), ReadError> {
        self.view.lock().host_error = e.map(host_error);
        Ok(())
    }

    fn host(
        &mut self,
        t_ns: u64,
        h: &HostTracker,
        r: Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let placed = placements(&self.root, h);
        self.vm_names = h.vms().iter().map(|v| (v.pid, v.name.clone())).collect();
        let mut v = self.view.lock();
        v.host_error = r.err().map(host_error);
        v.host |= !placed.is_empty();
        let at = |tid: u32| {
            placed
                .iter()
                .find(|(t, _)| *t == tid)
                .map(|(_, p)| p.clone())
                .unwrap_or_default()
        };
        v.vms
            .push(t_ns, h.vms(), h.samples(), at, self.sched.as_deref());
        Ok(())
    }

    fn sched(&mut self, r: Result<&Arc<SchedSample>, String>) -> Result<(), ReadError> {
        match r {
            Ok(s) => {
                let route = s.route.as_str();
                let lost = s.stats.lost_events;
                let status = if lost > 0 {
                    format!("culprits: {route} route, {lost} events lost")
                } else {
                    format!("culprits: {route} route")
                };
                self.sched = Some(s.clone());
                let mut v = self.view.lock();
                if v.culprits != status {
                    v.culprits = status;
                }
            }
            Err(e) => {
                self.sched = None;
                self.view.lock().culprits = format!("culprits n/a: {e}");
            }
        }
        Ok(())
    }
}

impl Findings for SharedView {
    fn start_failed(&self, e: ReadError) {
        self.lock().findings_error = Some(e.to_string());
    }

    fn report(&self, r: Result<DoctorReport, ReadError>) {
        let mut v = self.lock();
        match r {
            Ok(r) => {
                // The live scanner's open waits stand for the interval's.
                let live: Vec<Finding> = v
                    .findings
                    .iter()
                    .filter(|f| f.id == STARVED)
                    .cloned()
                    .collect();
                v.findings = r.findings;
                v.findings.retain(|f| f.id != STARVED);
                v.findings.extend(live);
                rank(&mut v.findings);
                v.findings_error = None;
            }
            Err(e) => v.findings_error = Some(e.to_string()),
        }
        v.findings_at = Some(Instant::now());
    }
}

/// Whether to run the scheduler-event collector (who ran while each vCPU
/// waited), and what the VM panel says until it reports: only on the live
/// root (the events are this kernel's) and only when VMs run, since the
/// trace costs every context switch of the machine. Unprivileged, it is
/// still tried, so that the panel says why it could not start.
pub fn attribution(root: &std::path::Path) -> (bool, String) {
    if root != std::path::Path::new("/") {
        return (
            false,
            "culprits n/a: scheduler events only on --root /".into(),
        );
    }
    let (host, _) = HostTracker::start(root);
    if host.vms().is_empty() {
        return (false, "culprits n/a: no VMs when top started".into());
    }
    (true, "culprits: starting".into())
}

/// A live view being filled: the engine's threads, the view they fill, and
/// what the header says of the machine.
pub struct Started {
    pub live: crate::Live,
    pub view: std::sync::Arc<SharedView>,
    pub hostname: Option<String>,
    /// Guest steal means something only in a guest (the hypervisor flag;
    /// the panel also shows once any steal is counted).
    pub guest: bool,
}

/// Opens the sampler on `root` and starts filling a view. No hardware
/// counters: the IPC rule needs them read with every sample, and a live
/// view need not hold perf groups open.
pub fn start(
    root: &std::path::Path,
    rate_hz: f64,
    findings_every: std::time::Duration,
) -> Result<Started, Box<dyn std::error::Error>> {
    use stealscope_readers::Source;
    let (sched, culprits) = attribution(root);
    let opened = crate::Opened::open(
        crate::SamplerOptions {
            sched,
            ..crate::SamplerOptions::new(root)
        },
        None,
    )?;
    let src = RootFs::new(root);
    let hostname = src.read_value("/proc/sys/kernel/hostname").ok().flatten();
    let guest = stealscope_readers::cpuinfo::read(&src)
        .ok()
        .flatten()
        .is_some_and(|c| c.has("hypervisor"));
    let clk = crate::capture::clk_tck().unwrap_or(stealscope_model::machine::DEFAULT_CLK_TCK);
    let view = std::sync::Arc::new(SharedView::new(clk as f64));
    let live = crate::Live::start(
        opened,
        rate_hz,
        findings_every,
        ViewFeed::new(view.clone(), root.to_path_buf(), culprits),
        view.clone(),
    )?;
    Ok(Started {
        live,
        view,
        hostname,
        guest,
    })
}
