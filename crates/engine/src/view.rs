//! What a live view (top) is shown: the recent windows, the VM rates, the
//! latest findings ([`View`], copied whole when the user pauses). The
//! engine's threads fill it; the screen only copies or draws it. One
//! mutex; every holder only copies, pushes or draws.

use crate::capture::monotonic_ns;
use crate::host::HostTracker;
use crate::rules::Findings;
use crate::sampler::{Sample, Subscriber};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use stealscope_analysis::{DoctorReport, Finding};
use stealscope_model::host::{vcpu_times, VmRateTracker};
use stealscope_model::recent::RecentWindows;
use stealscope_readers::ReadError;

/// Windows kept: wider than the sparkline of any usual terminal, and a
/// second of bars even at 1000 Hz; about 90 bytes per CPU each.
pub const HISTORY: usize = 1024;

#[derive(Clone)]
pub struct View {
    pub windows: RecentWindows,
    pub vms: VmRateTracker,
    /// A host scan has found a VM at some point: show the VM table.
    pub host: bool,
    pub findings: Vec<Finding>,
    pub findings_at: Option<Instant>,
    pub findings_error: Option<String>,
    /// The latest sampling error, shown until a sample succeeds.
    pub sample_error: Option<String>,
    /// The latest host scan's error, if it had one.
    pub host_error: Option<String>,
}

pub struct SharedView(Mutex<View>);

impl SharedView {
    pub fn new(clk_tck: f64) -> SharedView {
        SharedView(Mutex::new(View {
            windows: RecentWindows::new(clk_tck, HISTORY),
            vms: VmRateTracker::default(),
            host: false,
            findings: Vec::new(),
            findings_at: None,
            findings_error: None,
            sample_error: None,
            host_error: None,
        }))
    }

    pub fn lock(&self) -> MutexGuard<'_, View> {
        // A panicked holder leaves plain data behind: keep showing it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sampler's side of a view.
pub struct ViewFeed(pub std::sync::Arc<SharedView>);

fn host_error(e: ReadError) -> String {
    format!("host scan: {e}")
}

impl Subscriber for ViewFeed {
    fn sample(&mut self, s: Sample<'_>) -> Result<(), ReadError> {
        let mut v = self.0.lock();
        v.windows.push(s.t_ns, s.stat.clone());
        v.sample_error = None;
        Ok(())
    }

    fn sample_error(&mut self, e: ReadError) -> Result<(), ReadError> {
        self.0.lock().sample_error = Some(e.to_string());
        Ok(())
    }

    fn host_started(&mut self, e: Option<ReadError>) -> Result<(), ReadError> {
        self.0.lock().host_error = e.map(host_error);
        Ok(())
    }

    fn host(
        &mut self,
        _t: u64,
        h: &HostTracker,
        r: Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let vcpus = vcpu_times(h.vms(), h.samples());
        let t_ns = monotonic_ns();
        let mut v = self.0.lock();
        v.host_error = r.err().map(host_error);
        v.host |= !vcpus.is_empty();
        v.vms.push(t_ns, vcpus);
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
                v.findings = r.findings;
                v.findings_error = None;
            }
            Err(e) => v.findings_error = Some(e.to_string()),
        }
        v.findings_at = Some(Instant::now());
    }
}
