//! The VM table on a host: per VM, then per vCPU under it, the host-side
//! wait (run-queue wait of the vCPU thread, % of wall time between two
//! scans: the steal its guest is told), run time, the CPU it last ran on
//! and its affinity, and who ran while it waited (the scheduler-event
//! collector's culprits, shares of its wait). Sortable; columns are dropped
//! from the least useful when narrow, vCPU rows when short.

use super::{heading_and_body, pct};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;
use std::cmp::Ordering;
use stealscope_model::host::{VcpuLive, VmLive};
use stealscope_who::{Charge, Kind};

/// Below this wait (% of wall time) a row names no culprits ("-").
pub const NEGLIGIBLE_WAIT_PCT: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmSort {
    Wait,
    Run,
    Name,
    Vcpus,
}

impl VmSort {
    /// The `s` key: the next order.
    pub fn next(self) -> VmSort {
        match self {
            VmSort::Wait => VmSort::Run,
            VmSort::Run => VmSort::Name,
            VmSort::Name => VmSort::Vcpus,
            VmSort::Vcpus => VmSort::Wait,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            VmSort::Wait => "wait",
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

/// The VMs in display order (ties by name).
pub fn sorted(vms: &[VmLive], by: VmSort) -> Vec<&VmLive> {
    let mut v: Vec<&VmLive> = vms.iter().collect();
    v.sort_by(|a, b| {
        let first = match by {
            VmSort::Wait => desc(a.wait_pct, b.wait_pct),
            VmSort::Run => desc(a.run_pct, b.run_pct),
            VmSort::Name => Ordering::Equal,
            VmSort::Vcpus => b.vcpus.len().cmp(&a.vcpus.len()),
        };
        first.then_with(|| a.vm.cmp(&b.vm))
    });
    v
}

/// A culprit as kind and name ("process hog[42]", "vCPU web").
pub fn culprit_label(w: &Charge) -> String {
    let c = &w.culprit;
    match (c.kind, c.pid) {
        (Kind::Vcpu, _) => format!("vCPU {}", c.name),
        (Kind::Vmm, _) => format!("VMM {}", c.name),
        (Kind::HostKthread, _) => format!("kthread {}", c.name),
        (Kind::HostProcess, Some(p)) => format!("process {}[{p}]", c.name),
        (Kind::HostProcess, None) => format!("process {}", c.name),
        (Kind::Unknown, _) if c.name == "idle" => "idle (wake-up)".into(),
        _ => c.name.clone(),
    }
}

/// A culprit by name alone, for narrow columns ("hog", "vCPU web").
fn short_label(w: &Charge) -> String {
    if w.culprit.kind.is_host() {
        w.culprit.name.clone()
    } else {
        culprit_label(w)
    }
}

/// The culprits that fit `width`, most first, each with its share of the
/// wait; shares under 1% are left out. Names alone when the full labels
/// would leave out the second culprit. "n/a" without a collector reading.
pub fn culprits_text(c: Option<&[Charge]>, width: usize) -> String {
    let Some(c) = c else {
        return stealscope_findings::units::NA.into();
    };
    // stealscope's own threads are its cost, not a culprit.
    let shown: Vec<&Charge> = c
        .iter()
        .filter(|w| w.share >= 0.01 && w.culprit.kind != Kind::Own)
        .collect();
    let fit = |label: &dyn Fn(&Charge) -> String| -> (String, usize) {
        // Culprits that read the same (two processes of one name) as one.
        let mut merged: Vec<(String, f64)> = Vec::new();
        for w in &shown {
            let l = label(w);
            match merged.iter_mut().find(|(m, _)| *m == l) {
                Some(m) => m.1 += w.share,
                None => merged.push((l, w.share)),
            }
        }
        merged.sort_by(|a, b| b.1.total_cmp(&a.1));
        let (mut out, mut n) = (String::new(), 0);
        for (l, share) in &merged {
            let item = format!("{l} {:.0}%", 100.0 * share);
            let sep = if out.is_empty() { "" } else { ", " };
            if out.chars().count() + sep.len() + item.chars().count() > width {
                if out.is_empty() {
                    out = item.chars().take(width).collect();
                }
                break;
            }
            out.push_str(sep);
            out.push_str(&item);
            n += 1;
        }
        (out, n)
    };
    let (mut out, n) = fit(&culprit_label);
    if n < shown.len().min(2) {
        let (short, m) = fit(&short_label);
        if m > n || n == 0 {
            out = short;
        }
    }
    if out.is_empty() {
        out.push('-');
    }
    out
}

/// Which columns fit: (tid, CPU, affinity, run).
fn columns(width: u16, name_w: u16) -> [bool; 4] {
    // Name, wait and 16 cells of culprits are always shown; the rest in
    // this order while they fit.
    let mut left = i32::from(width) - i32::from(name_w) - 7 - 17;
    let mut on = [false; 4];
    for (i, w) in [(3, 7), (0, 8), (1, 4), (2, 10)] {
        if left >= w {
            on[i] = true;
            left -= w;
        }
    }
    on
}

/// The rows shown in `rows` lines: every VM, then the vCPUs of the VMs in
/// display order while they fit.
fn layout<'a>(vms: &[&'a VmLive], rows: usize) -> Vec<(&'a VmLive, Option<&'a VcpuLive>)> {
    let mut spare = rows.saturating_sub(vms.len());
    let mut out = Vec::new();
    for vm in vms.iter().take(rows) {
        out.push((*vm, None));
        if vm.vcpus.len() <= spare {
            spare -= vm.vcpus.len();
            out.extend(vm.vcpus.iter().map(|c| (*vm, Some(c))));
        }
    }
    out
}

pub fn render(frame: &mut Frame, area: Rect, vms: &[VmLive], by: VmSort, culprits: &str) {
    let (head, body) = heading_and_body(area);
    frame.render_widget(Paragraph::new(title(head, vms, by, culprits)), head);
    let name_w = vms
        .iter()
        .map(|v| v.vm.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(9, 30) as u16;
    let cols = Cols::of(body.width, name_w);
    let (names, widths) = cols.header();
    let header = Row::new(names).style(Style::new().add_modifier(Modifier::UNDERLINED));
    let shown = sorted(vms, by);
    let lines = layout(&shown, usize::from(body.height.saturating_sub(1)));
    let rows = lines.into_iter().map(|(vm, c)| cols.row(vm, c));
    frame.render_widget(Table::new(rows, widths).header(header), body);
}

/// "VMs 3 running, by wait (s: sort)  <culprits>", a reason too long for
/// the row cut (the help has all of it).
fn title(head: Rect, vms: &[VmLive], by: VmSort, culprits: &str) -> Line<'static> {
    let mut rest = format!(
        " {} running, by {} (s: sort)  {culprits}",
        vms.len(),
        by.label()
    );
    let room = usize::from(head.width).saturating_sub(3);
    if rest.chars().count() > room {
        let keep = room.saturating_sub(9);
        let cut: String = rest.chars().take(keep).collect();
        rest = format!("{}… ? why", cut.trim_end());
    }
    Line::from(vec![
        Span::styled("VMs", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(rest),
    ])
}

/// Which optional columns fit, and the culprits column's width.
struct Cols {
    name_w: u16,
    tid: bool,
    cpu: bool,
    aff: bool,
    run: bool,
    culprit_w: usize,
}

impl Cols {
    fn of(width: u16, name_w: u16) -> Cols {
        let [tid, cpu, aff, run] = columns(width, name_w);
        let mut c = Cols {
            name_w,
            tid,
            cpu,
            aff,
            run,
            culprit_w: 0,
        };
        let fixed: u16 = c
            .header()
            .1
            .iter()
            .map(|c| match c {
                Constraint::Length(w) => w + 1,
                _ => 0,
            })
            .sum();
        c.culprit_w = usize::from(width.saturating_sub(fixed));
        c
    }

    /// Column names and widths.
    fn header(&self) -> (Vec<&'static str>, Vec<Constraint>) {
        let mut names = vec!["VM / vCPU"];
        let mut widths = vec![Constraint::Length(self.name_w)];
        for (on, name, w) in [
            (self.tid, "tid", 7),
            (self.cpu, "CPU", 3),
            (self.aff, "affinity", 9),
            (true, "wait", 6),
            (self.run, "run", 6),
        ] {
            if on {
                names.push(name);
                widths.push(Constraint::Length(w));
            }
        }
        names.push("who ran while it waited");
        widths.push(Constraint::Fill(1));
        (names, widths)
    }

    /// A VM's row (`c` None) or one of its vCPUs'.
    fn row<'a>(&self, vm: &'a VmLive, c: Option<&'a VcpuLive>) -> Row<'a> {
        let (name, t, place, wait, run_pct, blame) = match c {
            None => (
                vm.vm.clone(),
                String::new(),
                None,
                vm.wait_pct,
                vm.run_pct,
                vm.culprits.as_deref(),
            ),
            Some(c) => (
                format!("  vCPU {}", c.vcpu),
                c.tid.to_string(),
                Some(&c.placement),
                c.wait_pct,
                c.run_pct,
                c.culprits.as_deref(),
            ),
        };
        let mut cells = vec![Cell::from(name)];
        if self.tid {
            cells.push(Cell::from(format!("{t:>7}")));
        }
        if self.cpu {
            let v = place.and_then(|p| p.cpu).map(|c| c.to_string());
            cells.push(Cell::from(format!("{:>3}", v.unwrap_or_default())));
        }
        if self.aff {
            let v = place.and_then(|p| p.affinity.clone());
            cells.push(Cell::from(v.unwrap_or_default()));
        }
        cells.push(Cell::from(format!("{:>6}", pct(wait))));
        if self.run {
            cells.push(Cell::from(format!("{:>6}", pct(run_pct))));
        }
        // Shares of a wait too small to matter would only be noise.
        let text = match (wait, blame) {
            (Some(w), Some(_)) if w < NEGLIGIBLE_WAIT_PCT => "-".to_string(),
            _ => culprits_text(blame, self.culprit_w),
        };
        cells.push(Cell::from(text));
        let style = if c.is_none() {
            Style::new().add_modifier(Modifier::BOLD)
        } else {
            Style::new().fg(Color::Gray)
        };
        Row::new(cells).style(style)
    }
}

#[cfg(test)]
#[path = "vm_table_tests.rs"]
mod tests;
