//! Per-VM host steal and run time between two host scans, for live views:
//! a vCPU's host steal is the growth of its thread's run-queue wait over the
//! wall time between the scans (what its guest is told), and a VM's figures
//! are the mean over its vCPUs, as in [`super::derived`].

use super::vcpu_times::VcpuTimes;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub struct VmRate {
    /// The VM's label from [`super::vcpu_times`] (name, with the pid when
    /// two VMs share a name).
    pub vm: String,
    /// vCPU threads seen in the latest scan.
    pub vcpus: usize,
    /// Mean run-queue wait of the vCPUs measured in both scans, % of wall
    /// time; None until a vCPU was seen twice.
    pub steal_pct: Option<f64>,
    /// Mean run time of the same vCPUs, % of wall time.
    pub run_pct: Option<f64>,
}

/// Rates of the VMs in `now`; vCPUs missing from `before` (new VMs, new
/// threads) or whose counters went back (a thread id reused) are not measured.
pub fn vm_rates(before: &[VcpuTimes], now: &[VcpuTimes], wall_s: f64) -> Vec<VmRate> {
    let mut out: Vec<VmRate> = Vec::new();
    let mut sums: Vec<(f64, f64, usize)> = Vec::new();
    // By key, not a scan of `before` per vCPU: 10,000 vCPUs a host.
    let before: HashMap<(&str, u32), &VcpuTimes> = before
        .iter()
        .map(|b| ((b.vm.as_str(), b.vcpu), b))
        .collect();
    for v in now {
        if out.last().is_none_or(|r| r.vm != v.vm) {
            out.push(VmRate {
                vm: v.vm.clone(),
                vcpus: 0,
                steal_pct: None,
                run_pct: None,
            });
            sums.push((0.0, 0.0, 0));
        }
        let (Some(row), Some(sum)) = (out.last_mut(), sums.last_mut()) else {
            continue;
        };
        row.vcpus += 1;
        let prev = before.get(&(v.vm.as_str(), v.vcpu)).copied();
        if let Some(p) = prev.filter(|p| v.wait_s >= p.wait_s && v.run_s >= p.run_s) {
            if wall_s > 0.0 {
                sum.0 += v.wait_s - p.wait_s;
                sum.1 += v.run_s - p.run_s;
                sum.2 += 1;
            }
        }
    }
    for (row, (wait, run, n)) in out.iter_mut().zip(sums) {
        if n > 0 {
            let per = |s: f64| 100.0 * s / n as f64 / wall_s;
            row.steal_pct = Some(per(wait));
            row.run_pct = Some(per(run));
        }
    }
    out
}

/// The previous scan and the rates since it.
#[derive(Debug, Clone, Default)]
pub struct VmRateTracker {
    prev: Option<(u64, Vec<VcpuTimes>)>,
    rates: Vec<VmRate>,
}

impl VmRateTracker {
    /// Adds a scan taken at `t_ns` (CLOCK_MONOTONIC); `vcpus` sorted by VM
    /// as [`super::vcpu_times`] returns them.
    pub fn push(&mut self, t_ns: u64, vcpus: Vec<VcpuTimes>) {
        let wall_s = match &self.prev {
            Some((t0, _)) if t_ns > *t0 => (t_ns - t0) as f64 / 1e9,
            _ => 0.0,
        };
        let before = self.prev.as_ref().map_or(&[][..], |(_, v)| v.as_slice());
        self.rates = vm_rates(before, &vcpus, wall_s);
        self.prev = Some((t_ns, vcpus));
    }

    pub fn rates(&self) -> &[VmRate] {
        &self.rates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(vm: &str, vcpu: u32, wait_s: f64, run_s: f64) -> VcpuTimes {
        VcpuTimes {
            vm: vm.into(),
            vcpu,
            wait_s,
            run_s,
        }
    }

    #[test]
    fn mean_over_the_vcpus_measured_twice() {
        let before = [
            t("a", 0, 1.0, 5.0),
            t("a", 1, 2.0, 5.0),
            t("b", 0, 0.0, 0.0),
        ];
        let now = [
            t("a", 0, 1.5, 5.5),
            t("a", 1, 2.1, 5.9),
            t("b", 0, 0.0, 0.2),
            t("c", 0, 9.0, 9.0),
        ];
        let r = vm_rates(&before, &now, 2.0);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].vm.as_str(), r[0].vcpus), ("a", 2));
        // (0.5 + 0.1) / 2 vCPUs / 2 s = 15 %; run (0.5 + 0.9) / 2 / 2 = 35 %.
        assert!((r[0].steal_pct.unwrap() - 15.0).abs() < 1e-9);
        assert!((r[0].run_pct.unwrap() - 35.0).abs() < 1e-9);
        assert_eq!(r[1].steal_pct, Some(0.0));
        assert!((r[1].run_pct.unwrap() - 10.0).abs() < 1e-9);
        // c started between the scans: counted, not measured.
        assert_eq!((r[2].vcpus, r[2].steal_pct, r[2].run_pct), (1, None, None));
    }

    #[test]
    fn reused_thread_and_first_scan_are_not_measured() {
        let r = vm_rates(&[t("a", 0, 5.0, 5.0)], &[t("a", 0, 0.1, 0.1)], 1.0);
        assert_eq!(r[0].steal_pct, None);
        let mut tr = VmRateTracker::default();
        tr.push(1_000_000_000, vec![t("a", 0, 1.0, 1.0)]);
        assert_eq!(tr.rates()[0].steal_pct, None);
        tr.push(1_500_000_000, vec![t("a", 0, 1.25, 1.0)]);
        assert!((tr.rates()[0].steal_pct.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(tr.rates()[0].run_pct, Some(0.0));
        tr.push(1_500_000_000, vec![]);
        assert!(tr.rates().is_empty());
    }
}
