//! Per-CPU busy / steal / idle over the last second: a stacked bar and the
//! three numbers, shares of the time the kernel accounted (as top and
//! mpstat), one row per online CPU (hotplug: the rows follow the CPUs of the
//! newest window).

use super::{heading_and_body, pct};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use stealscope_model::recent::RecentWindows;
use stealscope_model::CpuInterval;

/// The bars show this much of the past: long enough that 10 ms ticks do not
/// make them flicker, short enough to follow a burst.
pub const SPAN_S: f64 = 1.0;

pub const BUSY: (&str, Color) = ("█", Color::Green);
pub const STEAL: (&str, Color) = ("▓", Color::Red);
pub const IDLE: (&str, Color) = ("░", Color::DarkGray);

/// A bar narrower than this says nothing: numbers only.
const MIN_BAR: usize = 6;

pub fn render(frame: &mut Frame, area: Rect, windows: &RecentWindows) {
    let (head, body) = heading_and_body(area);
    let cpus = windows.over_last(SPAN_S);
    let shown = cpus.len().min(usize::from(body.height));
    let mut title = vec![
        Span::styled("CPU", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(" last {SPAN_S:.0} s  ")),
    ];
    for (name, (glyph, color)) in [("busy", BUSY), ("steal", STEAL), ("idle", IDLE)] {
        title.push(Span::styled(glyph, Style::new().fg(color)));
        title.push(Span::raw(format!("{name} ")));
    }
    if shown < cpus.len() {
        title.push(Span::raw(format!("({shown} of {} CPUs)", cpus.len())));
    }
    frame.render_widget(Paragraph::new(Line::from(title)), head);
    if cpus.is_empty() {
        frame.render_widget(Paragraph::new("waiting for the first window"), body);
        return;
    }
    let label_w = cpus
        .iter()
        .map(|c| format!("cpu{}", c.cpu).len())
        .max()
        .unwrap_or(4);
    let lines: Vec<Line> = cpus
        .iter()
        .take(shown)
        .map(|c| row(c, label_w, usize::from(body.width)))
        .collect();
    frame.render_widget(Paragraph::new(lines), body);
}

/// One CPU: label, bar when there is room, the numbers (long or short form).
pub fn row(c: &CpuInterval, label_w: usize, width: usize) -> Line<'static> {
    let s = c.accounted_shares();
    let (busy, steal, idle) = (
        s.map(|s| s.busy),
        s.and_then(|s| s.steal),
        s.map(|s| s.idle),
    );
    let long = format!(
        " busy {:>6} steal {:>6} idle {:>6}",
        pct(busy),
        pct(steal),
        pct(idle)
    );
    let short_pct = |v: Option<f64>| v.map_or(" n/a".to_string(), |v| format!("{v:>3.0}"));
    let short = format!(
        " b{} s{} i{}",
        short_pct(busy),
        short_pct(steal),
        short_pct(idle)
    );
    let room = width.saturating_sub(label_w + 1);
    let (numbers, bar_w) = if room >= long.chars().count() + MIN_BAR {
        (long.clone(), room - long.chars().count())
    } else if room >= long.chars().count() {
        (long, 0)
    } else if room >= short.chars().count() + MIN_BAR {
        (short.clone(), room - short.chars().count())
    } else {
        (short, 0)
    };
    let mut spans = vec![Span::raw(format!("{:<label_w$} ", format!("cpu{}", c.cpu)))];
    if bar_w > 0 {
        spans.extend(bar(c, bar_w));
    }
    spans.push(Span::raw(numbers));
    Line::from(spans)
}

/// Cells of each segment, rounded on the running total so they add up to
/// `width`; all idle when nothing was accounted.
pub fn cells(c: &CpuInterval, width: usize) -> [usize; 3] {
    let s = c.accounted_shares();
    let busy = s.map_or(0.0, |s| s.busy / 100.0).clamp(0.0, 1.0);
    let steal = s.and_then(|s| s.steal).map_or(0.0, |v| v / 100.0);
    let upto_steal = (busy + steal).clamp(0.0, 1.0);
    let b = (busy * width as f64).round() as usize;
    let s = ((upto_steal * width as f64).round() as usize).saturating_sub(b);
    [b, s, width.saturating_sub(b + s)]
}

fn bar(c: &CpuInterval, width: usize) -> Vec<Span<'static>> {
    cells(c, width)
        .into_iter()
        .zip([BUSY, STEAL, IDLE])
        .filter(|(n, _)| *n > 0)
        .map(|(n, (glyph, color))| Span::styled(glyph.repeat(n), Style::new().fg(color)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn rows_carry_the_model_numbers() {
        // cpu0: 3 user + 2 steal ticks of 10 per window; cpu1: 10 busy.
        let w = windows(&[(0, 3, 2), (1, 10, 0)], 30);
        let cpus = w.over_last(SPAN_S);
        let rows = screen(80, 3, |f| render_into(f, &w));
        assert!(rows[0].starts_with("CPU last 1 s"), "{rows:?}");
        for (c, line) in cpus.iter().zip(&rows[1..]) {
            let s = c.accounted_shares().unwrap();
            let want = format!(
                "busy {:>6} steal {:>6} idle {:>6}",
                pct(Some(s.busy)),
                pct(s.steal),
                pct(Some(s.idle))
            );
            assert!(line.starts_with(&format!("cpu{} ", c.cpu)), "{line}");
            assert!(line.trim_end().ends_with(&want), "{line} !~ {want}");
        }
        assert!(rows[1].contains(" 30.0%") && rows[1].contains(" 20.0%"));
        // The bar has as many cells of each kind as the shares say.
        let bar_w = 80 - 5 - 37;
        let [b, s, i] = cells(&cpus[0], bar_w);
        assert_eq!((b, s, i), (11, 8, 19));
        assert_eq!(rows[1].matches('█').count(), b);
        assert_eq!(rows[1].matches('▓').count(), s);
        assert_eq!(rows[1].matches('░').count(), i);
        assert_eq!(rows[2].matches('█').count(), bar_w);
    }

    #[test]
    fn narrow_and_short_areas() {
        let w = windows(&[(0, 3, 2), (1, 10, 0), (12, 0, 10)], 30);
        // 3 CPUs, room for 2: the heading says so.
        let rows = screen(60, 3, |f| render_into(f, &w));
        assert!(rows[0].contains("(2 of 3 CPUs)"), "{rows:?}");
        // 30 columns: the short form with a bar; the labels line up.
        let rows = screen(30, 4, |f| render_into(f, &w));
        assert!(rows[1].starts_with("cpu0  "), "{rows:?}");
        assert!(rows[3].starts_with("cpu12 ") && rows[3].contains("s100"));
        assert!(rows[1].trim_end().ends_with("b 30 s 20 i 50"), "{rows:?}");
        // A CPU whose kernel has no steal column says n/a, not 0.
        let mut c = w.over_last(1.0)[0];
        c.has_steal = false;
        let line = row(&c, 4, 60).to_string();
        assert!(line.contains("steal    n/a"), "{line}");
    }

    #[test]
    fn cells_add_up_whatever_the_shares() {
        let w = windows(&[(0, 3, 2)], 3);
        let mut c = w.over_last(1.0)[0];
        for width in 0..40 {
            assert_eq!(cells(&c, width).iter().sum::<usize>(), width);
        }
        c.secs.steal = 99.0;
        assert_eq!(cells(&c, 10).iter().sum::<usize>(), 10);
        c.secs = Default::default();
        assert_eq!(cells(&c, 10), [0, 0, 10]);
        assert!(row(&c, 4, 60).to_string().contains("busy    n/a"));
    }

    fn render_into(f: &mut Frame, w: &RecentWindows) {
        render(f, f.area(), w)
    }
}
