//! Steal per window (100 ms at the default rate) as sparklines reaching as
//! far back as the width allows, newest at the right: all CPUs together,
//! then each CPU when they fit, else the CPU with the most steal on screen.

use super::{heading_and_body, pct};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, RenderDirection, Sparkline, SparklineBar};
use ratatui::Frame;
use stealscope_model::recent::RecentWindows;

/// One line per CPU up to this many CPUs; above, the total and the worst.
pub const PER_CPU_MAX: usize = 16;
/// The scale never goes below this, so that noise of a tick or two stays
/// low instead of filling the row.
pub const MIN_SCALE_PCT: f64 = 5.0;
/// A sparkline narrower than this is dropped for the numbers alone.
const MIN_SPARK: usize = 4;

/// Lines (without the heading) the panel would like for `cpus` CPUs.
pub fn rows_per_cpu(cpus: usize) -> usize {
    if cpus <= PER_CPU_MAX {
        1 + cpus
    } else {
        2
    }
}

/// A labelled series, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

impl Series {
    pub fn now(&self) -> Option<f64> {
        self.values.last().copied().flatten()
    }
    pub fn max(&self) -> Option<f64> {
        self.values.iter().flatten().copied().reduce(f64::max)
    }
    fn mean(&self) -> f64 {
        let v: Vec<f64> = self.values.iter().flatten().copied().collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }
}

/// The series to draw on `lines` rows, `n` windows each.
pub fn series(windows: &RecentWindows, n: usize, lines: usize) -> Vec<Series> {
    let mut out = vec![Series {
        label: "all".into(),
        values: windows.total_steal_series(n),
    }];
    if lines < 2 {
        return out;
    }
    let cpus: Vec<Series> = windows
        .cpus()
        .into_iter()
        .map(|cpu| Series {
            label: format!("cpu{cpu}"),
            values: windows.steal_series(cpu, n),
        })
        .collect();
    if cpus.len() <= PER_CPU_MAX && cpus.len() < lines {
        out.extend(cpus);
    } else if let Some(worst) = cpus
        .into_iter()
        .max_by(|a, b| a.mean().total_cmp(&b.mean()))
    {
        out.push(Series {
            label: format!("worst {}", worst.label),
            ..worst
        });
    }
    out
}

pub fn render(frame: &mut Frame, area: Rect, windows: &RecentWindows) {
    let (head, body) = heading_and_body(area);
    let lines = usize::from(body.height);
    let labels = series(windows, 1, lines);
    let label_w = labels.iter().map(|s| s.label.len()).max().unwrap_or(3);
    let long = |s: &Series| format!(" now {:>6} max {:>6}", pct(s.now()), pct(s.max()));
    let long_w = 22;
    let room = usize::from(body.width).saturating_sub(label_w + 1);
    let (use_long, spark_w) = if room >= long_w + MIN_SPARK {
        (true, room - long_w)
    } else if room >= 7 + MIN_SPARK {
        (false, room - 7)
    } else {
        (false, 0)
    };
    let n = spark_w.max(1);
    let all = series(windows, n, lines);
    let scale = all
        .iter()
        .filter_map(Series::max)
        .fold(MIN_SCALE_PCT, f64::max);
    let shown: Vec<_> = windows.windows().rev().take(n).collect();
    let span_s: f64 = shown.iter().map(|w| w.delta.wall_s).sum();
    // The mean window: single windows jitter with the sampler's wake-ups.
    let window_ms = 1e3 * span_s / shown.len().max(1) as f64;
    let title = Line::from(vec![
        Span::styled("steal", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            " per {window_ms:.0} ms window, last {span_s:.1} s (scale 0-{scale:.1}%)"
        )),
    ]);
    frame.render_widget(Paragraph::new(title), head);
    for (i, s) in all.iter().take(lines).enumerate() {
        let y = body.y.saturating_add(i as u16);
        let row = Rect {
            y,
            height: 1,
            ..body
        };
        let label = Rect {
            width: (label_w as u16).min(row.width),
            ..row
        };
        frame.render_widget(Paragraph::new(s.label.as_str()), label);
        let spark = Rect {
            x: row.x.saturating_add(label_w as u16 + 1),
            width: spark_w as u16,
            ..row
        };
        if spark_w > 0 {
            // Newest first, drawn from the right edge.
            let data: Vec<SparklineBar> = s
                .values
                .iter()
                .rev()
                .map(|v| SparklineBar::from(v.map(|p| (p * 10.0).round() as u64)))
                .collect();
            frame.render_widget(
                Sparkline::default()
                    .data(data)
                    .max((scale * 10.0).ceil() as u64)
                    .direction(RenderDirection::RightToLeft)
                    .style(Style::new().fg(Color::Red))
                    .absent_value_symbol("·"),
                spark,
            );
        }
        let numbers = if use_long {
            long(s)
        } else {
            format!(" {:>6}", pct(s.now()))
        };
        let x = spark.x.saturating_add(spark_w as u16);
        let nums = Rect {
            x,
            width: row.right().saturating_sub(x),
            ..row
        };
        frame.render_widget(Paragraph::new(numbers), nums);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn draw(w: &RecentWindows, width: u16, height: u16) -> Vec<String> {
        screen(width, height, |f| render(f, f.area(), w))
    }

    #[test]
    fn per_cpu_lines_with_the_model_numbers() {
        let w = windows(&[(0, 0, 2), (1, 0, 0)], 30);
        let rows = draw(&w, 60, 4);
        assert!(
            rows[0].starts_with("steal per 100 ms window, last 3.0 s (scale 0-20.0%)"),
            "{rows:?}"
        );
        // 2 + 0 stolen ticks of 20: 10 % for all CPUs together.
        assert!(rows[1].starts_with("all "), "{rows:?}");
        assert!(rows[1].ends_with(" now  10.0% max  10.0%"), "{rows:?}");
        assert!(rows[2].starts_with("cpu0") && rows[2].ends_with(" now  20.0% max  20.0%"));
        assert!(rows[3].ends_with(" now   0.0% max   0.0%"));
        // 30 windows of history, each one cell, newest at the right edge;
        // cpu0 at the top of the scale is a full block.
        let spark: String = rows[2].chars().skip(5).take(60 - 5 - 22).collect();
        assert_eq!(spark.matches('█').count(), 30, "{spark:?}");
        assert!(spark.ends_with('█') && spark.starts_with(' '));
    }

    #[test]
    fn many_cpus_or_few_rows_show_the_worst() {
        let mut cpus: Vec<(u32, u64, u64)> = (0..20).map(|c| (c, 1, 0)).collect();
        cpus[13].2 = 4;
        let w = windows(&cpus, 5);
        let s = series(&w, 5, 10);
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].label, "worst cpu13");
        assert_eq!(s[1].now().map(f64::round), Some(40.0));
        // Two CPUs on two rows: the total and the worst.
        let w = windows(&[(0, 0, 1), (1, 0, 3)], 5);
        let labels: Vec<String> = series(&w, 5, 2).into_iter().map(|s| s.label).collect();
        assert_eq!(labels, ["all", "worst cpu1"]);
        let rows = draw(&w, 24, 2);
        assert!(
            rows[1].starts_with("all ") && rows[1].ends_with(" 20.0%"),
            "{rows:?}"
        );
    }

    #[test]
    fn scale_has_a_floor_and_offline_windows_are_marked() {
        let w = windows(&[(0, 0, 0)], 3);
        assert!(draw(&w, 60, 2)[0].contains("(scale 0-5.0%)"));
        let mut r = RecentWindows::new(100.0, 10);
        let p = |s: &str| stealscope_readers::stat::parse(s, "/proc/stat").unwrap();
        r.push(
            0,
            p("cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n"),
        );
        r.push(
            100_000_000,
            p("cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 10 0 0 0 0\n"),
        );
        r.push(
            200_000_000,
            p("cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 20 0 0 0 0\ncpu1 0 0 0 9 0 0 0 1\n"),
        );
        r.push(
            300_000_000,
            p("cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 30 0 0 0 0\ncpu1 0 0 0 18 0 0 0 2\n"),
        );
        let rows = draw(&r, 40, 4);
        let cpu1 = rows.iter().find(|l| l.starts_with("cpu1")).unwrap();
        assert_eq!(cpu1.matches('·').count(), 2, "{rows:?}");
    }
}
