//! The top line: what is shown, at what rate, whether it is paused, and
//! the keys that matter most; under it, when something needs action, the
//! verdict and its fix, wrapped whole at the screen's width (cut at 80 and
//! 120 columns on one line, the fix was never seen).

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

/// The verdict's headline takes at most this many lines under the top
/// line, and its fix at most [`FIX_ROWS`]: each has rows of its own, so a
/// long headline never pushes the fix off (issue 28: at 80 columns a
/// noisy-neighbour verdict wraps to 6 lines; the fix was cut).
pub const HEADLINE_ROWS: usize = 3;
/// See [`HEADLINE_ROWS`].
pub const FIX_ROWS: usize = 4;
/// At most this many verdict lines in all, so that the panels keep the screen.
pub const VERDICT_ROWS: usize = HEADLINE_ROWS + FIX_ROWS;

/// The verdict of the rules' latest run when it needs action, and its
/// color: (status, lines of headline and fix wrapped at `width`).
fn verdict(input: &TopInput, width: u16) -> Option<(Color, Vec<String>)> {
    let v = stealscope_analysis::verdict::of(input.findings.findings);
    if input.findings.age_s.is_none() || !matches!(v.status, "warning" | "critical") {
        return None;
    }
    let color = if v.status == "critical" {
        Color::Red
    } else {
        Color::Yellow
    };
    let w = usize::from(width).max(20);
    let mut lines = fit(
        wrap(&format!("{}: {}", v.status.to_uppercase(), v.headline), w),
        HEADLINE_ROWS,
        w,
    );
    if let Some(fix) = &v.fix {
        lines.extend(fit(wrap(&format!("fix: {fix}"), w), FIX_ROWS, w));
    }
    Some((color, lines))
}

/// At most `rows` of `lines`; when more follow, the last says so ("~").
fn fit(mut lines: Vec<String>, rows: usize, width: usize) -> Vec<String> {
    if lines.len() > rows {
        lines.truncate(rows);
        if let Some(last) = lines.last_mut() {
            *last = last.chars().take(width - 1).collect::<String>() + "~";
        }
    }
    lines
}

/// Words of `text` on lines at most `width` wide (a word longer than a
/// line is cut).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push(line);
    }
    out.into_iter()
        .map(|l| l.chars().take(width).collect())
        .collect()
}

/// Rows the header takes at this width: the top line and the verdict.
pub fn height(input: &TopInput, width: u16) -> u16 {
    1 + verdict(input, width).map_or(0, |v| v.1.len() as u16)
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
    let mut lines = vec![Line::from(spans)];
    // The verdict of the rules' latest run, when something needs action
    // (the same one doctor opens with); the findings panel has the rest.
    if let Some((color, v)) = verdict(input, area.width) {
        let style = Style::new().fg(color);
        for (i, l) in v.into_iter().enumerate() {
            let style = if i == 0 {
                style.add_modifier(Modifier::BOLD)
            } else {
                style
            };
            lines.push(Line::from(Span::styled(l, style)));
        }
    }
    frame.render_widget(Paragraph::new(lines), area);
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
        let rows = screen(160, 2, |fr| {
            render(fr, fr.area(), &input(&w, None, &f, &ui))
        });
        assert!(
            rows[1].contains("WARNING: Host CPU contention: vCPUs waited 9.6%"),
            "{rows:?}"
        );
    }

    /// At 80 and 120 columns the whole verdict and its fix show, wrapped
    /// whole within the width.
    #[test]
    fn the_verdict_and_its_fix_wrap_at_80_and_120_columns() {
        use stealscope_analysis::{Finding, Severity};
        let w = windows(&[(0, 1, 1)], 2);
        let ui = UiState::default();
        let f = [Finding::new(
            "host.steal.busy",
            Severity::Critical,
            "vCPUs waited 37.5% of the time with no idle CPU: 4.0 runnable threads on 2 CPUs (3.0 vCPUs, 1.0 other host work)",
        )
        .evidence(
            stealscope_analysis::verdict::VERDICT_FIX,
            "host process `backup` (pid 900) takes 0.50 CPU: move or throttle it",
        )];
        for width in [80u16, 120] {
            let i = input(&w, None, &f, &ui);
            let h = height(&i, width);
            assert!(h >= 3, "{width}: {h}");
            let rows = screen(width, h, |fr| render(fr, fr.area(), &i));
            let all = rows[1..]
                .iter()
                .map(|r| r.trim_end())
                .collect::<Vec<_>>()
                .join(" ");
            assert!(all.contains("(3.0 vCPUs, 1.0 other host work)"), "{rows:?}");
            assert!(
                all.contains(
                    "fix: host process `backup` (pid 900) takes 0.50 CPU: move or throttle it"
                ),
                "{rows:?}"
            );
            assert!(rows.iter().all(|r| r.chars().count() <= usize::from(width)));
        }
    }

    /// A verdict whose headline wraps past its rows still shows its whole
    /// fix (it once took the fix's rows and cut it).
    #[test]
    fn a_long_headline_leaves_the_fix_whole() {
        use stealscope_analysis::{Finding, Severity};
        let w = windows(&[(0, 1, 1)], 2);
        let ui = UiState::default();
        let fix = "VM hog's vCPUs take 1.80 CPU (fair 1.00): Give VM hog CPUs of its own \
                   (pin it apart from its victims), a lower weight for its group, or move it to another host";
        let f = [Finding::new(
            "host.noisy-neighbor",
            Severity::Critical,
            "VM hog's vCPUs ran 1.80 CPUs (fair 1.00) and caused 96% of all vCPU wait \
             (victims: victim-one, victim-two, victim-three, victim-four, victim-five, \
             victim-six, victim-seven, victim-eight, victim-nine, victim-ten)",
        )
        .evidence(stealscope_analysis::verdict::VERDICT_FIX, fix)];
        let i = input(&w, None, &f, &ui);
        let h = height(&i, 80);
        let rows = screen(80, h, |fr| render(fr, fr.area(), &i));
        let fix_rows: Vec<&str> = rows
            .iter()
            .map(|r| r.trim_end())
            .skip_while(|r| !r.starts_with("fix: "))
            .collect();
        assert!(!fix_rows.is_empty(), "{rows:?}");
        assert_eq!(fix_rows.join(" "), format!("fix: {fix}"), "{rows:?}");
        assert!(usize::from(h) <= 1 + VERDICT_ROWS, "{h}");
    }
}
