//! Host-side wait history: per VM (and per vCPU when the rows allow) the
//! run-queue wait of its vCPU threads per host scan as a sparkline, newest
//! at the right. Spare rows make the VMs' lines taller (finer steps of the
//! scale), so a tall terminal shows the history in more detail rather than
//! blank rows.

use super::{heading_and_body, pct, vm_table};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, RenderDirection, Sparkline, SparklineBar};
use ratatui::Frame;
use std::collections::VecDeque;
use stealscope_model::host::VmLive;

/// The scale never goes below this, as in the steal lines.
const MIN_SCALE_PCT: f64 = 5.0;
const NUMS_W: usize = 22;

/// One line of the panel: a label, a series and its height.
struct Band<'a> {
    label: String,
    values: &'a VecDeque<Option<f64>>,
    rows: usize,
    vm: bool,
}

/// Rows (heading included) the panel needs for `vms`: one per VM.
pub fn min_rows(vms: &[VmLive]) -> usize {
    1 + vms.len().max(1)
}

/// The bands for `rows` lines: every VM that fits, its vCPUs when all fit,
/// then spare rows to the VMs' lines.
fn bands<'a>(vms: &[&'a VmLive], rows: usize) -> Vec<Band<'a>> {
    let vcpus: usize = vms.iter().map(|v| v.vcpus.len()).sum();
    let with_vcpus = vms.len() + vcpus <= rows;
    let used = if with_vcpus {
        vms.len() + vcpus
    } else {
        vms.len()
    };
    // Spare rows make the VMs' lines taller, the first ones by one more
    // when they do not divide evenly.
    let spare = rows.saturating_sub(used);
    let n = vms.len().max(1);
    let mut out = Vec::new();
    for (i, vm) in vms.iter().take(rows).enumerate() {
        let extra = spare / n + usize::from(i < spare % n);
        out.push(Band {
            label: vm.vm.clone(),
            values: &vm.history,
            rows: 1 + extra,
            vm: true,
        });
        if with_vcpus {
            out.extend(vm.vcpus.iter().map(|c| Band {
                label: format!("  vCPU {}", c.vcpu),
                values: &c.history,
                rows: 1,
                vm: false,
            }));
        }
    }
    out
}

fn now(v: &VecDeque<Option<f64>>) -> Option<f64> {
    v.back().copied().flatten()
}

fn max(v: &VecDeque<Option<f64>>, n: usize) -> Option<f64> {
    v.iter().rev().take(n).flatten().copied().reduce(f64::max)
}

pub fn render(frame: &mut Frame, area: Rect, vms: &[VmLive], sort: vm_table::VmSort) {
    let (head, body) = heading_and_body(area);
    let shown = vm_table::sorted(vms, sort);
    let bands = bands(&shown, usize::from(body.height));
    let label_w = bands
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(2)
        .min(30);
    let room = usize::from(body.width).saturating_sub(label_w + 1);
    let (nums, spark_w) = if room >= NUMS_W + 4 {
        (true, room - NUMS_W)
    } else {
        (false, room)
    };
    let n = spark_w.max(1);
    let scale = bands
        .iter()
        .filter_map(|b| max(b.values, n))
        .fold(MIN_SCALE_PCT, f64::max);
    let scans = bands
        .iter()
        .map(|b| b.values.len().min(n))
        .max()
        .unwrap_or(0);
    let title = Line::from(vec![
        Span::styled("wait", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            " of the vCPUs per 1 s scan, last {scans} s (scale 0-{scale:.1}%)"
        )),
    ]);
    frame.render_widget(Paragraph::new(title), head);
    let mut y = body.y;
    for b in &bands {
        let h = (b.rows as u16).min(body.bottom().saturating_sub(y));
        if h == 0 {
            break;
        }
        let row = Rect {
            y,
            height: h,
            ..body
        };
        let style = if b.vm {
            Style::new().add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        };
        let label = Rect {
            width: (label_w as u16).min(row.width),
            height: 1,
            ..row
        };
        frame.render_widget(Paragraph::new(b.label.as_str()).style(style), label);
        let spark = Rect {
            x: row.x.saturating_add(label_w as u16 + 1),
            width: (spark_w as u16).min(row.width.saturating_sub(label_w as u16 + 1)),
            ..row
        };
        let data: Vec<SparklineBar> = b
            .values
            .iter()
            .rev()
            .map(|v| SparklineBar::from(v.map(|p| (p * 10.0).round() as u64)))
            .collect();
        let color = if b.vm { Color::Yellow } else { Color::DarkGray };
        frame.render_widget(
            Sparkline::default()
                .data(data)
                .max((scale * 10.0).ceil() as u64)
                .direction(RenderDirection::RightToLeft)
                .style(Style::new().fg(color))
                .absent_value_symbol("·"),
            spark,
        );
        if nums {
            let x = spark.right();
            let r = Rect {
                x,
                width: row.right().saturating_sub(x),
                height: 1,
                ..row
            };
            let text = format!(
                " now {:>6} max {:>6}",
                pct(now(b.values)),
                pct(max(b.values, n))
            );
            frame.render_widget(Paragraph::new(text), r);
        }
        y = y.saturating_add(h);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use vm_table::VmSort;

    #[test]
    fn one_line_per_vm_then_vcpus_then_taller_lines() {
        let mut a = vm("a", 2, Some(50.0), Some(50.0));
        a.history = (0..30).map(|i| Some(f64::from(i % 2) * 50.0)).collect();
        let b = vm("b", 1, Some(0.0), Some(5.0));
        let vms = [a, b];
        // Two rows: the VMs only, highest wait first.
        let rows = screen(80, 3, |f| render(f, f.area(), &vms, VmSort::Wait));
        assert!(
            rows[0].starts_with("wait of the vCPUs per 1 s scan"),
            "{rows:?}"
        );
        assert!(rows[0].contains("last 30 s (scale 0-50.0%)"), "{rows:?}");
        assert!(
            rows[1].starts_with("a ") && rows[2].starts_with("b "),
            "{rows:?}"
        );
        assert!(rows[1].ends_with(" now  50.0% max  50.0%"), "{rows:?}");
        // 30 scans, one cell each, newest at the right: 15 full blocks.
        assert_eq!(rows[1].matches('█').count(), 15, "{rows:?}");
        // Five rows: both VMs and their three vCPUs.
        let rows = screen(80, 6, |f| render(f, f.area(), &vms, VmSort::Wait));
        let firsts: Vec<&str> = rows[1..].iter().map(|r| &r[..8]).collect();
        assert_eq!(
            firsts,
            ["a       ", "  vCPU 0", "  vCPU 1", "b       ", "  vCPU 0"]
        );
        // Eleven: three spare rows each make the VMs' lines taller.
        let rows = screen(80, 12, |f| render(f, f.area(), &vms, VmSort::Wait));
        assert!(
            rows[1].starts_with("a ") && rows[5].starts_with("  vCPU 0"),
            "{rows:?}"
        );
        assert!(
            rows[7].starts_with("b ") && rows[11].starts_with("  vCPU 0"),
            "{rows:?}"
        );
    }
}
