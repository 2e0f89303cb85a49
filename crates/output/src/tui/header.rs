//! The top line: what is shown, at what rate, whether it is paused, and
//! the keys that matter most.

use super::TopInput;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// The rate as the header says it: Hz and the window it gives.
pub fn rate_text(hz: f64) -> String {
    let ms = 1000.0 / hz;
    if ms >= 1000.0 {
        format!("{hz:.2} Hz ({:.1} s)", ms / 1000.0)
    } else {
        format!("{hz:.0} Hz ({ms:.0} ms)")
    }
}

pub fn render(frame: &mut Frame, area: Rect, input: &TopInput) {
    let mut spans = vec![
        Span::styled("stealscope top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {}  {}",
            input.hostname.unwrap_or("?"),
            rate_text(input.ui.rate_hz)
        )),
    ];
    if input.ui.paused {
        spans.push(Span::styled(
            "  PAUSED",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    let anomalies = input.windows.counter_anomalies();
    if anomalies > 0 {
        spans.push(Span::styled(
            format!(
                "  {anomalies} counter {} clamped",
                if anomalies == 1 {
                    "anomaly"
                } else {
                    "anomalies"
                }
            ),
            Style::new().fg(Color::Magenta),
        ));
    }
    // The verdict of the rules' latest run, when something needs action
    // (the same one doctor opens with); the findings panel has the rest.
    let v = stealscope_analysis::verdict::of(input.findings.findings);
    if input.findings.age_s.is_some() && matches!(v.status, "warning" | "critical") {
        let color = if v.status == "critical" {
            Color::Red
        } else {
            Color::Yellow
        };
        spans.push(Span::styled(
            format!("  {}: {}", v.status.to_uppercase(), v.headline),
            Style::new().fg(color).add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(n) = input.notice {
        spans.push(Span::styled(
            format!("  {n}"),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    spans.push(Span::styled(
        "  ? help  q quit",
        Style::new().fg(Color::DarkGray),
    ));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::UiState;
    use super::*;

    #[test]
    fn says_rate_pause_and_host() {
        let w = windows(&[(0, 1, 1)], 2);
        let ui = UiState {
            rate_hz: 20.0,
            paused: true,
            ..Default::default()
        };
        let rows = screen(80, 1, |f| render(f, f.area(), &input(&w, None, &[], &ui)));
        assert_eq!(
            rows[0].trim_end(),
            "stealscope top  testhost  20 Hz (50 ms)  PAUSED  ? help  q quit"
        );
        assert_eq!(rate_text(0.5), "0.50 Hz (2.0 s)");
        let i = TopInput {
            notice: Some("/proc/stat: gone"),
            ..input(&w, None, &[], &ui)
        };
        let rows = screen(100, 1, |f| render(f, f.area(), &i));
        assert!(
            rows[0].contains("PAUSED  /proc/stat: gone  ? help"),
            "{rows:?}"
        );
    }

    #[test]
    fn names_the_top_finding_like_doctor() {
        use stealscope_analysis::{Finding, Severity};
        let w = windows(&[(0, 1, 1)], 2);
        let ui = UiState::default();
        let f = [Finding::new(
            "host.steal.idle",
            Severity::Warning,
            "vCPUs waited 9.6%",
        )];
        let rows = screen(160, 1, |fr| {
            render(fr, fr.area(), &input(&w, None, &f, &ui))
        });
        assert!(
            rows[0].contains("WARNING: Host CPU contention: vCPUs waited 9.6%"),
            "{rows:?}"
        );
    }
}
