//! Which panels fit, and how tall each is. In order of importance (CPU
//! bars, steal lines, findings, VMs) each panel gets the rows it would like
//! (the bars at most half), or its minimum, or, when not even that fits,
//! nothing: it is dropped. Rows left go to the panels in the same order,
//! and the last panel shown takes the remainder.

use super::{steal_lines, TopInput};
use ratatui::layout::Rect;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub bars: Option<Rect>,
    pub steal: Option<Rect>,
    pub findings: Option<Rect>,
    pub vms: Option<Rect>,
}

/// Rows a panel needs (heading included) and would like.
#[derive(Debug, Clone, Copy)]
struct Want {
    min: u16,
    ideal: u16,
}

fn rows(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

fn wants(input: &TopInput) -> [Option<Want>; 4] {
    let cpus = rows(input.windows.cpus().len().max(1));
    let findings = rows(input.findings.findings.len().max(1));
    let per_cpu = steal_lines::rows_per_cpu(input.windows.cpus().len());
    [
        Some(Want {
            min: 2,
            ideal: cpus.saturating_add(1),
        }),
        Some(Want {
            min: 2,
            ideal: rows(per_cpu).saturating_add(1),
        }),
        Some(Want {
            min: 2,
            ideal: findings.saturating_add(1),
        }),
        input.vms.map(|v| Want {
            min: 3,
            ideal: rows(v.len().max(1)).saturating_add(2),
        }),
    ]
}

pub fn split(area: Rect, input: &TopInput) -> Areas {
    let header = Rect { height: 1, ..area };
    let mut left = area.height.saturating_sub(1);
    let wants = wants(input);
    // First pass: what each would like, the CPU bars at most half the rows
    // (a 64-CPU machine must not push everything else off the screen),
    // else its minimum.
    let bars_cap = (left / 2).max(wants[0].map_or(0, |w| w.min));
    let mut got = [0u16; 4];
    for (i, (g, w)) in got.iter_mut().zip(&wants).enumerate() {
        let Some(w) = w else { continue };
        let cap = if i == 0 { bars_cap } else { u16::MAX };
        let comfortable = w.ideal.min(cap).min(left);
        *g = if comfortable >= w.min {
            comfortable
        } else if w.min <= left {
            w.min
        } else {
            0
        };
        left -= *g;
    }
    // Then the rest, in the same order, up to what each would like.
    for (g, w) in got.iter_mut().zip(&wants) {
        if let (Some(w), true) = (w, *g > 0) {
            let more = w.ideal.saturating_sub(*g).min(left);
            *g += more;
            left -= more;
        }
    }
    if let Some(last) = got.iter_mut().rev().find(|g| **g > 0) {
        *last += left;
    }
    let mut y = area.y.saturating_add(1);
    let mut next = |h: u16| {
        (h > 0).then(|| {
            let r = Rect {
                y,
                height: h,
                ..area
            };
            y = y.saturating_add(h);
            r
        })
    };
    Areas {
        header,
        bars: next(got[0]),
        steal: next(got[1]),
        findings: next(got[2]),
        vms: next(got[3]),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::UiState;
    use super::*;
    use stealscope_model::host::VmRate;

    fn vm(name: &str) -> VmRate {
        VmRate {
            vm: name.into(),
            vcpus: 1,
            steal_pct: None,
            run_pct: None,
        }
    }

    #[test]
    fn panels_are_dropped_from_the_least_important() {
        let w = windows(&[(0, 1, 1), (1, 1, 1)], 3);
        let vms = [vm("a"), vm("b")];
        let ui = UiState::default();
        let i = input(&w, Some(&vms), &[], &ui);
        let a = split(Rect::new(0, 0, 40, 30), &i);
        // Everything fits: 2 CPUs + heading, total and 2 CPU lines + heading,
        // one findings row + heading, 2 VMs + heading + column names.
        assert_eq!(a.bars.unwrap().height, 3);
        assert_eq!(a.steal.unwrap().height, 4);
        assert_eq!(a.findings.unwrap().height, 2);
        assert_eq!(a.vms.unwrap().height, 30 - 1 - 3 - 4 - 2);
        // 40x10: bars, steal and findings; no room for the VM table.
        let a = split(Rect::new(0, 0, 40, 10), &i);
        assert!(a.vms.is_none());
        assert_eq!(a.bars.unwrap().height, 3);
        assert_eq!(a.steal.unwrap().height, 4);
        assert_eq!(a.findings.unwrap().height, 2);
        // 40x4: the bars only.
        let a = split(Rect::new(0, 0, 40, 4), &i);
        assert_eq!(a.bars.unwrap().height, 3);
        assert!(a.steal.is_none() && a.findings.is_none());
        // 64 CPUs on 24 rows: the bars first take half, the other panels
        // what they would like, and the bars the rows left.
        let many: Vec<(u32, u64, u64)> = (0..64).map(|c| (c, 1, 1)).collect();
        let w64 = windows(&many, 2);
        let i64 = input(&w64, Some(&vms), &[], &ui);
        let a = split(Rect::new(0, 0, 80, 24), &i64);
        assert_eq!(a.steal.unwrap().height, 3);
        assert_eq!(a.findings.unwrap().height, 2);
        assert_eq!(a.vms.unwrap().height, 4);
        assert_eq!(a.bars.unwrap().height, 23 - 3 - 2 - 4);
        // Panels never overlap and stay inside the area.
        for h in 0..40 {
            let a = split(Rect::new(0, 0, 40, h), &i);
            let used: u16 = [a.bars, a.steal, a.findings, a.vms]
                .iter()
                .flatten()
                .map(|r| r.height)
                .sum();
            assert!(used < h.max(1), "h={h}: {a:?}");
        }
    }
}
