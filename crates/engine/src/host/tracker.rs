//! A host scan kept going by a long-running command (serve, record):
//! discovery at the start and whenever a VMM process starts ([`VmmWatch`]),
//! otherwise one schedstat read per known thread per scan ([`HostScanner`]).
//! Failures are handed back for the caller to report; the tracker goes on
//! with what it found before.

use super::scanner::{HostScanner, ScannedVm, ThreadSample};
use super::watch::VmmWatch;
use std::path::Path;
use stealscope_model::host::{HostObservation, ThreadRole};
use stealscope_readers::{ReadError, RootFs, Source};

#[derive(Default)]
pub struct HostTracker {
    scanner: Option<HostScanner>,
    watch: VmmWatch,
    samples: Vec<ThreadSample>,
    /// CLOCK_MONOTONIC right before the last scan's reads (see `read_ns`).
    read_ns: u64,
}

impl HostTracker {
    /// Primes the watch (so that only VMMs started later trigger a
    /// rediscovery) and discovers the VMs running now.
    pub fn start(root: &Path) -> (HostTracker, Option<ReadError>) {
        let mut t = HostTracker::default();
        let primed = t.watch.check(&RootFs::new(root)).err();
        let found = t.rediscover(root).err();
        (t, primed.or(found))
    }

    /// As [`Self::start`], from what a side read through `src` holds (a
    /// checkpoint's files and its host observation): the watch is primed
    /// with its process list and the VMs are those it found, so starting
    /// costs no walk of /proc.
    pub fn start_from(
        root: &Path,
        src: &dyn Source,
        obs: HostObservation,
    ) -> (HostTracker, Option<ReadError>) {
        let mut t = HostTracker::default();
        let primed = t.watch.check(src).err();
        t.scanner = Some(HostScanner::from_observation(root, obs));
        (t, primed)
    }

    /// Keeps the previous scanner when discovery fails. A VM found with
    /// no vCPU thread yet is looked for again ([`VmmWatch::again`]).
    fn rediscover(&mut self, root: &Path) -> Result<(), ReadError> {
        let obs = HostScanner::observe(root)?;
        let old = self.scanner.take();
        let sc = HostScanner::reusing(root, obs, old);
        for vm in &sc.vms {
            if !vm
                .threads
                .iter()
                .any(|t| matches!(t.role, ThreadRole::Vcpu(_)))
            {
                self.watch.again(vm.pid);
            }
        }
        self.scanner = Some(sc);
        Ok(())
    }

    /// One scan of every known thread, after a rediscovery if `look_for_new`
    /// and a VMM started (that check lists /proc: on a VM guest it costs
    /// more than the scan). The scan happens even when the check failed.
    pub fn scan(&mut self, root: &Path, look_for_new: bool) -> Result<(), ReadError> {
        let checked = match look_for_new.then(|| self.watch.check(&RootFs::new(root))) {
            Some(Ok(true)) => self.rediscover(root),
            Some(Ok(false)) | None => Ok(()),
            Some(Err(e)) => Err(e),
        };
        self.read_ns = stealscope_readers::clock::monotonic_ns();
        match self.scanner.as_mut() {
            Some(sc) => sc.scan(&mut self.samples),
            None => self.samples.clear(),
        }
        checked
    }

    /// When the last scan read its threads: after the VMM check and any
    /// rediscovery, which under load took hundreds of ms and, stamped
    /// before them, gave `top` vCPU rows of over 100 % wait + run.
    pub fn read_ns(&self) -> u64 {
        self.read_ns
    }

    pub fn vms(&self) -> &[ScannedVm] {
        self.scanner.as_ref().map_or(&[], |s| &s.vms)
    }

    /// The threads read by the last scan.
    pub fn samples(&self) -> &[ThreadSample] {
        &self.samples
    }
}
