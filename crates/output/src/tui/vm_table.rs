//! The per-VM table on a host: vCPUs, host steal (run-queue wait of the
//! vCPU threads) and run time, % of wall time per vCPU, sortable.

use super::{heading_and_body, pct};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;
use std::cmp::Ordering;
use stealscope_model::host::VmRate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmSort {
    Steal,
    Run,
    Name,
    Vcpus,
}

impl VmSort {
    /// The `s` key: the next order.
    pub fn next(self) -> VmSort {
        match self {
            VmSort::Steal => VmSort::Run,
            VmSort::Run => VmSort::Name,
            VmSort::Name => VmSort::Vcpus,
            VmSort::Vcpus => VmSort::Steal,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            VmSort::Steal => "host steal",
            VmSort::Run => "run",
            VmSort::Name => "name",
            VmSort::Vcpus => "vCPUs",
        }
    }
}

/// Largest first; unmeasured last.
fn desc(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The rows in display order (ties by name).
pub fn sorted(vms: &[VmRate], by: VmSort) -> Vec<&VmRate> {
    let mut v: Vec<&VmRate> = vms.iter().collect();
    v.sort_by(|a, b| {
        let first = match by {
            VmSort::Steal => desc(a.steal_pct, b.steal_pct),
            VmSort::Run => desc(a.run_pct, b.run_pct),
            VmSort::Name => Ordering::Equal,
            VmSort::Vcpus => b.vcpus.cmp(&a.vcpus),
        };
        first.then_with(|| a.vm.cmp(&b.vm))
    });
    v
}

pub fn render(frame: &mut Frame, area: Rect, vms: &[VmRate], by: VmSort) {
    let (head, body) = heading_and_body(area);
    let title = Line::from(vec![
        Span::styled("VMs", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            " {} running, by {} (s: sort)",
            vms.len(),
            by.label()
        )),
    ]);
    frame.render_widget(Paragraph::new(title), head);
    let header = Row::new(["VM", "vCPUs", "host steal", "run"])
        .style(Style::new().add_modifier(Modifier::UNDERLINED));
    let rows = sorted(vms, by).into_iter().map(|v| {
        Row::new([
            Cell::from(v.vm.clone()),
            Cell::from(format!("{:>5}", v.vcpus)),
            Cell::from(format!("{:>10}", pct(v.steal_pct))),
            Cell::from(format!("{:>7}", pct(v.run_pct))),
        ])
    });
    // As wide as the longest name (within reason), so the numbers sit next
    // to it rather than across the screen.
    let name_w = vms.iter().map(|v| v.vm.chars().count()).max().unwrap_or(0);
    let widths = [
        Constraint::Length(name_w.clamp(4, 40) as u16),
        Constraint::Length(5),
        Constraint::Length(10),
        Constraint::Length(7),
    ];
    frame.render_widget(Table::new(rows, widths).header(header), body);
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn vm(name: &str, vcpus: usize, steal: Option<f64>, run: Option<f64>) -> VmRate {
        VmRate {
            vm: name.into(),
            vcpus,
            steal_pct: steal,
            run_pct: run,
        }
    }

    #[test]
    fn rows_follow_the_sort_order() {
        let vms = [
            vm("a", 1, Some(5.0), Some(90.0)),
            vm("b", 4, Some(30.0), Some(10.0)),
            vm("c", 2, None, None),
        ];
        let names = |by| -> Vec<&str> { sorted(&vms, by).iter().map(|v| v.vm.as_str()).collect() };
        assert_eq!(names(VmSort::Steal), ["b", "a", "c"]);
        assert_eq!(names(VmSort::Run), ["a", "b", "c"]);
        assert_eq!(names(VmSort::Name), ["a", "b", "c"]);
        assert_eq!(names(VmSort::Vcpus), ["b", "c", "a"]);
        let mut s = VmSort::Steal;
        for _ in 0..4 {
            s = s.next();
        }
        assert_eq!(s, VmSort::Steal);
    }

    #[test]
    fn table_shows_the_numbers() {
        let vms = [
            vm("web", 2, Some(12.5), Some(40.0)),
            vm("db", 4, Some(1.0), None),
        ];
        let rows = screen(50, 5, |f| render(f, f.area(), &vms, VmSort::Steal));
        assert_eq!(rows[0].trim_end(), "VMs 2 running, by host steal (s: sort)");
        let cols = |r: &str| r.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(cols(&rows[1]), ["VM", "vCPUs", "host", "steal", "run"]);
        assert_eq!(cols(&rows[2]), ["web", "2", "12.5%", "40.0%"]);
        assert_eq!(cols(&rows[3]), ["db", "4", "1.0%", "n/a"]);
    }
}
