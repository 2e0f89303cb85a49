//! The help overlay: the keys and what the numbers mean.

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

pub fn render(frame: &mut Frame, area: Rect) {
    let w = WIDTH.min(area.width);
    let h = (LINES.len() as u16 + 2).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, popup);
    let lines: Vec<Line> = LINES.iter().map(|l| Line::from(*l)).collect();
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
            render(f, f.area())
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
}
