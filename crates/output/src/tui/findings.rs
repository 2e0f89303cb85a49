//! The rule engine's latest findings: severity, id and title, most severe
//! first (the report's own ranking).

use super::{heading_and_body, FindingsInput};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;
use stealscope_analysis::Severity;

pub fn severity_tag(s: Severity) -> (&'static str, Color) {
    match s {
        Severity::Critical => ("CRIT", Color::Red),
        Severity::Warning => ("WARN", Color::Yellow),
        Severity::Info => ("INFO", Color::Blue),
    }
}

/// What the heading says about the last run.
pub fn status(f: &FindingsInput) -> String {
    match (f.error, f.age_s) {
        (Some(e), _) => format!("rules failed: {e}"),
        (None, None) => format!("first run after {:.0} s", f.every_s),
        (None, Some(age)) => format!(
            "rules over {:.0} s, run {:.0} s ago",
            f.every_s,
            age.max(0.0)
        ),
    }
}

/// A title in `room` columns: whole words and `…` when it is longer (at
/// 80 columns a title cut mid-word read as "6.5 runnab").
pub(super) fn fit(title: &str, room: usize) -> String {
    if title.chars().count() <= room {
        return title.to_string();
    }
    let keep = room.saturating_sub(1);
    let head: String = title.chars().take(keep).collect();
    // Ends at a word's end when the next character is a space.
    let whole = title.chars().nth(keep) == Some(' ');
    let head = match head.rfind(' ') {
        Some(i) if i > 0 && !whole => &head[..i],
        _ => head.as_str(),
    }
    .trim_end_matches([',', ':', ';']);
    format!("{head}…")
}

pub fn render(frame: &mut Frame, area: Rect, f: &FindingsInput) {
    let (head, body) = heading_and_body(area);
    let shown = f.findings.len().min(usize::from(body.height));
    let mut title = vec![Span::styled(
        "findings",
        Style::new().add_modifier(Modifier::BOLD),
    )];
    if shown < f.findings.len() {
        title.push(Span::raw(format!(" ({shown} of {})", f.findings.len())));
    }
    title.push(Span::raw(format!(" {}", status(f))));
    frame.render_widget(Paragraph::new(Line::from(title)), head);
    let lines: Vec<Line> = if f.findings.is_empty() {
        let none = if f.age_s.is_some() { "none" } else { "" };
        vec![Line::from(none)]
    } else {
        f.findings
            .iter()
            .take(shown)
            .map(|x| {
                let (tag, color) = severity_tag(x.severity);
                let room = usize::from(body.width).saturating_sub(tag.len() + x.id.len() + 2);
                Line::from(vec![
                    Span::styled(tag, Style::new().fg(color).add_modifier(Modifier::BOLD)),
                    Span::raw(format!(" {} ", x.id)),
                    Span::styled(fit(&x.title, room), Style::new().fg(Color::Gray)),
                ])
            })
            .collect()
    };
    frame.render_widget(Paragraph::new(lines), body);
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use stealscope_analysis::Finding;

    fn input(findings: &[Finding], age_s: Option<f64>) -> FindingsInput<'_> {
        FindingsInput {
            findings,
            age_s,
            every_s: 5.0,
            error: None,
        }
    }

    #[test]
    fn lists_the_findings_it_is_given() {
        let f = [
            Finding::new("steal.busy", Severity::Critical, "host oversubscribed"),
            Finding::new("clock.unstable", Severity::Warning, "clocksource is hpet"),
            Finding::new("tuning.io-scheduler", Severity::Info, "mq-deadline"),
        ];
        let rows = screen(60, 4, |fr| render(fr, fr.area(), &input(&f, Some(2.4))));
        assert_eq!(rows[0].trim_end(), "findings rules over 5 s, run 2 s ago");
        for (row, x) in rows[1..].iter().zip(&f) {
            let tag = severity_tag(x.severity).0;
            assert_eq!(row.trim_end(), format!("{tag} {} {}", x.id, x.title));
        }
        // One row for three findings: the most severe, and the heading
        // says how many there are.
        let rows = screen(60, 2, |fr| render(fr, fr.area(), &input(&f, Some(1.0))));
        assert!(
            rows[0].starts_with("findings (1 of 3) rules over"),
            "{rows:?}"
        );
        assert!(rows[1].starts_with("CRIT steal.busy"));
    }

    /// A title longer than its row ends in whole words and an ellipsis.
    #[test]
    fn a_long_title_is_cut_between_words() {
        let f = [Finding::new(
            "host.steal.busy",
            Severity::Critical,
            "vCPUs waited 77.5% of the time with no idle CPU: 6.5 runnable threads",
        )];
        let rows = screen(80, 2, |fr| render(fr, fr.area(), &input(&f, Some(1.0))));
        let row = rows[1].trim_end();
        assert_eq!(
            row,
            "CRIT host.steal.busy vCPUs waited 77.5% of the time with no idle CPU: 6.5…"
        );
        assert!(row.chars().count() <= 80);
        let rows = screen(40, 2, |fr| render(fr, fr.area(), &input(&f, Some(1.0))));
        assert_eq!(
            rows[1].trim_end(),
            "CRIT host.steal.busy vCPUs waited 77.5%…"
        );
    }

    #[test]
    fn before_the_first_run_and_after_a_failure() {
        let rows = screen(60, 2, |fr| render(fr, fr.area(), &input(&[], None)));
        assert_eq!(rows[0].trim_end(), "findings first run after 5 s");
        assert_eq!(rows[1].trim(), "");
        let rows = screen(60, 2, |fr| render(fr, fr.area(), &input(&[], Some(0.0))));
        assert_eq!(rows[1].trim(), "none");
        let failed = FindingsInput {
            error: Some("/proc/stat: gone"),
            ..input(&[], Some(3.0))
        };
        let rows = screen(60, 2, |fr| render(fr, fr.area(), &failed));
        assert!(rows[0].contains("rules failed: /proc/stat: gone"));
    }
}
