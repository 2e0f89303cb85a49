//! Which panels fit, and how tall each is. In order of importance each
//! panel gets the rows it would like (the CPU bars at most half), or its
//! minimum, or, when not even that fits, nothing: it is dropped. Rows left
//! go to the panels in the same order up to what each would like, then to
//! the wait history (taller lines), else to the last panel shown.
//! A guest shows CPU bars, steal lines, findings; a host the VM table and
//! wait history first, then CPU bars and findings, and guest steal lines
//! only when it is itself a guest ([`super::TopInput::guest`]).

use super::{exact_steal, steal_lines, wait_history, TopInput};
use ratatui::layout::Rect;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    pub bars: Option<Rect>,
    pub steal: Option<Rect>,
    pub exact: Option<Rect>,
    pub findings: Option<Rect>,
    pub vms: Option<Rect>,
    pub history: Option<Rect>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Panel {
    Bars,
    Steal,
    Exact,
    Findings,
    Vms,
    History,
}

/// Rows a panel needs (heading included), would like, and can use at most.
#[derive(Debug, Clone, Copy)]
struct Want {
    panel: Panel,
    min: u16,
    ideal: u16,
    most: u16,
}

fn rows(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// The panels in screen order, which is also their order of importance.
fn wants(input: &TopInput, width: u16) -> Vec<Want> {
    let cpus = rows(input.windows.cpus().len().max(1));
    let findings = rows(input.findings.findings.len().max(1));
    let per_cpu = steal_lines::rows_per_cpu(input.windows.cpus().len());
    let want = |panel, min: u16, ideal: u16| Want {
        panel,
        min,
        ideal,
        most: ideal,
    };
    let bars = want(Panel::Bars, 2, cpus.saturating_add(1));
    let steal = want(Panel::Steal, 2, rows(per_cpu).saturating_add(1));
    let found = want(Panel::Findings, 2, findings.saturating_add(1));
    let exact = want(
        Panel::Exact,
        2,
        rows(exact_steal::ideal_rows(input.exact, width)),
    );
    let Some(vms) = input.vms else {
        return vec![bars, steal, exact, found];
    };
    let vcpus: usize = vms.iter().map(|v| v.vcpus.len()).sum();
    let table = want(
        Panel::Vms,
        3,
        rows(vms.len().max(1) + vcpus).saturating_add(2),
    );
    // The history can use every spare row (taller lines).
    let history = Want {
        most: u16::MAX,
        ..want(Panel::History, 2, rows(wait_history::min_rows(vms)))
    };
    let mut out = vec![table, history, bars, found];
    if input.guest_steal() {
        out.extend([steal, exact]);
    }
    out
}

pub fn split(area: Rect, input: &TopInput) -> Areas {
    // The top line and the verdict under it (wrapped at this width).
    let header_h = super::header::height(input, area.width).min(area.height);
    let header = Rect {
        height: header_h,
        ..area
    };
    let mut left = area.height.saturating_sub(header_h);
    let wants = wants(input, area.width);
    // First pass: what each would like, the CPU bars at most half the rows
    // (a 64-CPU machine must not push everything else off the screen),
    // else its minimum.
    let bars_cap = (left / 2).max(2);
    let mut got = vec![0u16; wants.len()];
    for (g, w) in got.iter_mut().zip(&wants) {
        let cap = if w.panel == Panel::Bars {
            bars_cap
        } else {
            u16::MAX
        };
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
    // Then the rest, in the same order, up to what each would like, then
    // to what each can use.
    for pass in [false, true] {
        for (g, w) in got.iter_mut().zip(&wants) {
            let goal = if pass { w.most } else { w.ideal };
            if *g > 0 {
                let more = goal.saturating_sub(*g).min(left);
                *g += more;
                left -= more;
            }
        }
    }
    if let Some(last) = got.iter_mut().rev().find(|g| **g > 0) {
        *last += left;
    }
    let mut areas = Areas {
        header,
        bars: None,
        steal: None,
        exact: None,
        findings: None,
        vms: None,
        history: None,
    };
    let mut y = area.y.saturating_add(header_h);
    for (h, w) in got.into_iter().zip(&wants) {
        if h == 0 {
            continue;
        }
        let r = Some(Rect {
            y,
            height: h,
            ..area
        });
        y = y.saturating_add(h);
        match w.panel {
            Panel::Bars => areas.bars = r,
            Panel::Steal => areas.steal = r,
            Panel::Exact => areas.exact = r,
            Panel::Findings => areas.findings = r,
            Panel::Vms => areas.vms = r,
            Panel::History => areas.history = r,
        }
    }
    areas
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::UiState;
    use super::*;

    fn used(a: &Areas) -> u16 {
        [a.bars, a.steal, a.exact, a.findings, a.vms, a.history]
            .iter()
            .flatten()
            .map(|r| r.height)
            .sum()
    }

    #[test]
    fn guest_panels_are_dropped_from_the_least_important() {
        let w = windows(&[(0, 1, 1), (1, 1, 1)], 3);
        let ui = UiState::default();
        let i = input(&w, None, &[], &ui);
        let a = split(Rect::new(0, 0, 40, 30), &i);
        // 2 CPUs + heading, total and 2 CPU lines + heading, why exact
        // steal is off + heading, and the findings (one row + heading)
        // take the rest.
        assert_eq!(a.bars.unwrap().height, 3);
        assert_eq!(a.steal.unwrap().height, 4);
        assert_eq!(a.exact.unwrap().height, 2);
        assert_eq!(a.findings.unwrap().height, 30 - 1 - 3 - 4 - 2);
        assert!(a.vms.is_none() && a.history.is_none());
        // 40x4: the bars only.
        let a = split(Rect::new(0, 0, 40, 4), &i);
        assert_eq!(a.bars.unwrap().height, 3);
        assert!(a.steal.is_none() && a.findings.is_none());
        // 64 CPUs on 24 rows: the bars first take half, the other panels
        // what they would like, and the bars the rows left.
        let many: Vec<(u32, u64, u64)> = (0..64).map(|c| (c, 1, 1)).collect();
        let w64 = windows(&many, 2);
        let i64 = input(&w64, None, &[], &ui);
        let a = split(Rect::new(0, 0, 80, 24), &i64);
        assert_eq!(a.steal.unwrap().height, 3);
        assert_eq!(a.exact.unwrap().height, 2);
        assert_eq!(a.findings.unwrap().height, 2);
        assert_eq!(a.bars.unwrap().height, 23 - 3 - 2 - 2);
    }

    #[test]
    fn a_host_shows_vms_first_and_fills_tall_terminals() {
        // No steal counted and not a guest: no steal lines.
        let w = windows(&[(0, 5, 0), (1, 5, 0)], 3);
        let vms = [vm("a", 2, None, None), vm("b", 1, None, None)];
        let ui = UiState::default();
        let i = input(&w, Some(&vms), &[], &ui);
        let a = split(Rect::new(0, 0, 160, 45), &i);
        assert!(a.steal.is_none());
        let (t, h, b, f) = (
            a.vms.unwrap(),
            a.history.unwrap(),
            a.bars.unwrap(),
            a.findings.unwrap(),
        );
        // Screen order: VMs, history, bars, findings.
        assert!(t.y < h.y && h.y < b.y && b.y < f.y);
        // 2 VMs + 3 vCPUs + heading + column names.
        assert_eq!(t.height, 7);
        // The history takes the rest (taller lines): every row is used.
        assert_eq!((b.height, f.height), (3, 2));
        assert_eq!(h.height, 44 - 7 - 3 - 2);
        assert_eq!(used(&a), 44);
        // One VM on a guest that is a host too: its steal lines come last
        // at what they would like, and the history still takes the rest.
        let one = [vm("a", 2, None, None)];
        let g1 = TopInput {
            guest: true,
            ..input(&w, Some(&one), &[], &ui)
        };
        let a = split(Rect::new(0, 0, 160, 45), &g1);
        assert_eq!(a.steal.unwrap().height, 4);
        assert_eq!(a.exact.unwrap().height, 2);
        assert_eq!(a.history.unwrap().height, 44 - 5 - 3 - 2 - 4 - 2);
        assert_eq!(used(&a), 44);
        // A guest that is a host too keeps its steal lines, last.
        let g = TopInput { guest: true, ..i };
        let a = split(Rect::new(0, 0, 160, 45), &g);
        assert!(a.steal.unwrap().y > a.findings.unwrap().y);
        // 80x10: the table, one history line per VM, then what fits.
        let a = split(Rect::new(0, 0, 80, 10), &i);
        assert_eq!(a.vms.unwrap().height, 7);
        assert!(a.history.is_some_and(|h| h.height == 2));
        // Panels never overlap and stay inside the area.
        for h in 0..60 {
            let a = split(Rect::new(0, 0, 40, h), &i);
            assert!(used(&a) < h.max(1), "h={h}: {a:?}");
        }
    }
}
