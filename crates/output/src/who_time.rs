//! Who stole it over time, summed once from a recording's culprits per host
//! scan (`Timeline::culprits`): per VM, its largest culprits over the whole
//! recording and their seconds per time bin. The HTML table, the text view
//! and `report --json` all print this one summary.

use crate::bins::TimeBins;
use serde::Serialize;
use std::collections::BTreeMap;
use stealscope_model::timeline::CulpritWindow;
use stealscope_who::{Charge, Culprit, Kind};

/// One time bin of a VM: its vCPU wait in the bin, by culprit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bin {
    /// Offset from the recording's first sample, seconds.
    pub start_s: f64,
    pub width_s: f64,
    /// All of this VM's vCPU wait in the bin, seconds.
    pub wait_s: f64,
    /// Seconds per culprit, in the order of `culprits`, then `other`.
    pub seconds: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmOverTime {
    pub vm: String,
    /// All of this VM's vCPU wait the recording attributes, seconds.
    pub wait_s: f64,
    /// Its largest culprits, most first (at most `top` of them); shares:
    /// of this VM's vCPU wait over the recording.
    pub culprits: Vec<Charge>,
    /// Everything else, seconds (the scans' own `other` included).
    pub other_s: f64,
    pub bins: Vec<Bin>,
}

/// `report --json`: the doctor's JSON with who stole it over time.
#[derive(Serialize)]
pub struct ReportJson<'a> {
    #[serde(flatten)]
    pub report: &'a stealscope_analysis::DoctorReport,
    pub culprits_over_time: &'a [VmOverTime],
}

/// The summary `report` prints in text and JSON: 4 culprit columns and 12
/// time bins fit 80 columns and a screen per VM; a culprit under 1 % of a
/// VM's wait is a column of zeros, so it counts in `other`.
pub fn for_report(w: &[CulpritWindow]) -> Vec<VmOverTime> {
    summarize(w, 4, 0.01, 12)
}

/// Each window with its span: from the VM's previous scan (or one second
/// before, for its first).
pub fn spans(w: &[CulpritWindow]) -> Vec<(f64, f64, &CulpritWindow)> {
    let mut last: BTreeMap<&str, f64> = BTreeMap::new();
    w.iter()
        .map(|c| {
            let start = last.insert(&c.vm, c.t_s).unwrap_or(c.t_s - 1.0);
            (start, (c.t_s - start).max(1e-3), c)
        })
        .collect()
}

/// Per VM (by name), its `top` largest culprits of at least `min_share` of
/// its wait and the rest, with the seconds of each in at most `max_bins`
/// bins shared by all VMs.
pub fn summarize(
    w: &[CulpritWindow],
    top: usize,
    min_share: f64,
    max_bins: usize,
) -> Vec<VmOverTime> {
    let mut totals: BTreeMap<&str, BTreeMap<&Culprit, f64>> = BTreeMap::new();
    for c in w {
        let m = totals.entry(&c.vm).or_default();
        for r in &c.culprits {
            *m.entry(&r.culprit).or_default() += r.seconds;
        }
    }
    let sp = spans(w);
    let bins = TimeBins::over(sp.iter().map(|(a, d, _)| (*a, *d)), max_bins);
    totals
        .into_iter()
        .map(|(vm, m)| {
            let wait_s: f64 = m.values().sum();
            let mut ranked: Vec<(&Culprit, f64)> = m.into_iter().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            let culprits: Vec<Charge> = ranked
                .iter()
                .filter(|(c, s)| c.kind != Kind::Other && *s >= min_share * wait_s)
                .take(top)
                .map(|(c, s)| Charge {
                    culprit: (*c).clone(),
                    seconds: *s,
                    share: s / wait_s.max(1e-12),
                })
                .collect();
            let shown: f64 = culprits.iter().map(|c| c.seconds).sum();
            let bins = bins.map_or_else(Vec::new, |b| vm_bins(&sp, vm, &culprits, &b));
            VmOverTime {
                vm: vm.to_string(),
                wait_s,
                other_s: (wait_s - shown).max(0.0),
                culprits,
                bins,
            }
        })
        .collect()
}

fn vm_bins(
    sp: &[(f64, f64, &CulpritWindow)],
    vm: &str,
    culprits: &[Charge],
    b: &TimeBins,
) -> Vec<Bin> {
    let mut cells = vec![vec![0.0f64; culprits.len() + 1]; b.n];
    for (start, dur, c) in sp.iter().filter(|s| s.2.vm == vm) {
        for r in &c.culprits {
            let col = culprits
                .iter()
                .position(|k| k.culprit == r.culprit)
                .unwrap_or(culprits.len());
            for (i, share) in b.spread(*start, *dur) {
                cells[i][col] += r.seconds * share;
            }
        }
    }
    cells
        .into_iter()
        .enumerate()
        .map(|(i, seconds)| Bin {
            start_s: b.t0 + i as f64 * b.width,
            width_s: b.width,
            wait_s: seconds.iter().sum(),
            seconds,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(t_s: f64, vm: &str, rows: &[(Kind, &str, f64)]) -> CulpritWindow {
        CulpritWindow {
            t_s,
            vm: vm.into(),
            culprits: rows
                .iter()
                .map(|(k, n, s)| Charge {
                    culprit: Culprit::new(*k, *n),
                    seconds: *s,
                    share: 0.0,
                })
                .collect(),
        }
    }

    /// Bins and totals agree, a culprit that leaves the top goes to other,
    /// and a change of culprit shows in the bins where it happened.
    #[test]
    fn totals_and_bins_add_up() {
        let mut w = Vec::new();
        for t in 1..=8 {
            let who = if t <= 4 { "burn" } else { "spin" };
            w.push(win(
                t as f64,
                "a",
                &[
                    (Kind::HostProcess, who, 0.9),
                    (Kind::HostKthread, "kworker", 0.05),
                    (Kind::Other, "other", 0.01),
                ],
            ));
        }
        let s = summarize(&w, 1, 0.0, 4);
        assert_eq!(s.len(), 1);
        let a = &s[0];
        assert!((a.wait_s - 8.0 * 0.96).abs() < 1e-9);
        assert_eq!(a.culprits.len(), 1);
        assert!((a.culprits[0].seconds + a.other_s - a.wait_s).abs() < 1e-9);
        assert_eq!(a.bins.len(), 4);
        let binned: f64 = a.bins.iter().map(|b| b.wait_s).sum();
        assert!((binned - a.wait_s).abs() < 1e-9, "{binned}");
        // The top culprit (a tie broken either way) fills one half of the
        // bins and is absent from the other half.
        let full = a.bins.iter().filter(|b| b.seconds[0] > 1.0).count();
        let none = a.bins.iter().filter(|b| b.seconds[0] < 0.5).count();
        assert_eq!((full, none), (2, 2), "{:?}", a.bins);
    }
}
