//! The help overlay: the keys, what the numbers mean, and on a host whether
//! culprits are attributed (the route, or the whole reason why not, which
//! the VM table's heading may have to cut).

use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

pub const LINES: [&str; 13] = [
    "q  Esc  Ctrl-C   quit",
    "?  h             show / hide this help",
    "p                pause / resume the display",
    "+  -             sample faster / slower",
    "s                sort VMs: wait, run, name, vCPUs",
    "",
    "busy: user+nice+system+irq+softirq",
    "idle: idle+iowait",
    "steal: the hypervisor ran something else",
    "VMs (host): wait = run-queue wait of the vCPU",
    "  threads (their guests' steal), run = run time,",
    "  CPU = where it last ran; who ran while it",
    "  waited: scheduler events, share of its wait",
];

const WIDTH: u16 = 52;

/// `culprits`: the VM table's attribution status, shown below the keys
/// when not empty.
pub fn render(frame: &mut Frame, area: Rect, culprits: &str) {
    let w = WIDTH.min(area.width);
    let mut lines: Vec<Line> = LINES.iter().map(|l| Line::from(*l)).collect();
    if !culprits.is_empty() {
        lines.push(Line::from(""));
        let inner = usize::from(w.saturating_sub(2)).max(1);
        lines.extend(
            textwrap::wrap(culprits, inner)
                .into_iter()
                .map(|l| Line::from(l.into_owned())),
        );
    }
    let h = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(" help ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn overlay_lists_every_key() {
        let rows = screen(60, 20, |f| {
            f.render_widget(
                Paragraph::new(vec![Line::from("x".repeat(60)); 20]),
                f.area(),
            );
            render(f, f.area(), "")
        });
        let text = rows.join("\n");
        for l in LINES.iter().filter(|l| !l.is_empty()) {
            assert!(text.contains(l), "{l:?} missing:\n{text}");
        }
        // Centred (52x15 in 60x20), and it clears what was under it: the
        // empty line between the keys and the glossary is blank.
        assert!(rows[2].starts_with("xxxx┌ help "), "{text}");
        let blank: String = rows[3 + 5].chars().skip(5).take(50).collect();
        assert_eq!(blank.trim(), "", "{text}");
        assert!(rows[1].chars().all(|c| c == 'x'));
    }

    #[test]
    fn the_whole_reason_culprits_are_missing_is_below_the_keys() {
        let why = "culprits n/a: no scheduler events: tracefs: /sys/kernel/tracing: \
                   permission denied (needs root); bpf: Operation not permitted";
        let rows = screen(60, 24, |f| render(f, f.area(), why));
        let text: String = rows
            .iter()
            .map(|r| r.trim_matches(|c: char| c == '│' || c.is_whitespace()))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            text.contains("permission denied (needs root); bpf:"),
            "{rows:#?}"
        );
        assert!(text.contains("Operation not permitted"), "{rows:#?}");
    }
}
