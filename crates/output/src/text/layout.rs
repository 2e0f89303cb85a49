//! Line layout for the text reports: words wrapped at the terminal's width,
//! never inside a word or a value (no hyphen splitting, no broken words;
//! a single token wider than the line stays whole on a line of its own).

use std::fmt::Write;
use std::io::IsTerminal;
use stealscope_analysis::Severity;
use textwrap::{core::display_width, Options, WordSeparator, WordSplitter};

/// How a text report is laid out.
#[derive(Debug, Clone, Copy)]
pub struct TextOpts {
    /// ANSI colour (only when asked, or on a terminal).
    pub color: bool,
    /// Columns to wrap at.
    pub width: usize,
    /// Every note in full and every evidence value, as in the JSON.
    pub verbose: bool,
}

impl TextOpts {
    /// No colour, 80 columns, brief: what a file or a pipe gets.
    pub fn plain() -> Self {
        TextOpts {
            color: false,
            width: 80,
            verbose: false,
        }
    }

    /// For stdout: colour when asked (`None`: on a terminal without
    /// NO_COLOR), laid out in [`stdout_width`] columns.
    pub fn for_stdout(color: Option<bool>, verbose: bool) -> Self {
        let auto = || std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        TextOpts {
            color: color.unwrap_or_else(auto),
            width: stdout_width(),
            verbose,
        }
    }
}

/// Columns the text report is laid out in: $COLUMNS when set, else the
/// terminal's width, else 80 (a file or a pipe).
pub fn stdout_width() -> usize {
    let env = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok());
    let term = || {
        std::io::stdout()
            .is_terminal()
            .then(terminal_size::terminal_size)
            .flatten()
            .map(|(w, _)| w.0 as usize)
    };
    env.or_else(term).unwrap_or(80).clamp(40, 1000)
}

const NBSP: char = '\u{a0}';

/// A `command` is a value: its spaces become no-break spaces for the
/// wrapper (and spaces again after it), unless it is wider than `room`.
fn keep_code_whole(text: &str, room: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 1 && display_width(part) + 2 <= room {
            out.push_str(&part.replace(' ', &NBSP.to_string()));
        } else {
            out.push_str(part);
        }
    }
    out
}

pub(crate) struct Style {
    pub color: bool,
    pub width: usize,
    pub verbose: bool,
}

impl Style {
    pub fn new(o: &TextOpts) -> Self {
        Style {
            color: o.color,
            width: o.width.max(40),
            verbose: o.verbose,
        }
    }
    pub fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub fn severity(&self, sev: Severity) -> String {
        match sev {
            Severity::Critical => self.paint("1;31", "CRITICAL"),
            Severity::Warning => self.paint("1;33", "WARNING"),
            Severity::Info => self.paint("36", "info"),
        }
    }
    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }

    /// Wraps `text` at the width; the first line starts with `lead`, the
    /// others with `hang` (by default as many spaces as `lead` is wide).
    pub fn wrap_hang(&self, out: &mut String, lead: &str, hang: &str, text: &str) {
        let opts = Options::new(self.width)
            .initial_indent(lead)
            .subsequent_indent(hang)
            .break_words(false)
            .word_separator(WordSeparator::AsciiSpace)
            .word_splitter(WordSplitter::NoHyphenation);
        let room = self.width.saturating_sub(display_width(hang));
        for line in textwrap::wrap(&keep_code_whole(text, room), opts) {
            let _ = writeln!(out, "{}", line.trim_end().replace(NBSP, " "));
        }
    }

    pub fn wrap(&self, out: &mut String, lead: &str, text: &str) {
        let hang = " ".repeat(display_width(lead));
        self.wrap_hang(out, lead, &hang, text);
    }

    /// Lays out items (each kept whole, spaces inside it included) joined
    /// by `sep`, breaking lines only between items; an item wider than a
    /// line breaks at its own spaces, never inside a word.
    pub fn items(&self, out: &mut String, lead: &str, items: &[String], sep: &str) {
        let hang = " ".repeat(display_width(lead));
        self.items_hang(out, lead, &hang, items, sep);
    }

    /// [`Style::items`] with the lines after the first starting `hang`.
    pub fn items_hang(
        &self,
        out: &mut String,
        lead: &str,
        hang: &str,
        items: &[String],
        sep: &str,
    ) {
        let room = self.width.saturating_sub(hang.len());
        let mut pieces: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let piece = if i + 1 < items.len() {
                format!("{item}{}", sep.trim_end())
            } else {
                item.clone()
            };
            if display_width(&piece) > room {
                pieces.extend(piece.split(' ').map(String::from));
            } else {
                pieces.push(piece);
            }
        }
        let mut line = lead.to_string();
        let mut empty = true;
        for piece in pieces {
            if !empty && display_width(&line) + 1 + display_width(&piece) > self.width {
                let _ = writeln!(out, "{line}");
                line = hang.to_string();
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(&piece);
            empty = false;
        }
        if !empty {
            let _ = writeln!(out, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_a_word_or_an_item() {
        let st = Style::new(&TextOpts::plain());
        let mut out = String::new();
        let text = "exits by reason PV_SCHED_YIELD cache-references cache-misses ".repeat(6);
        st.wrap(&mut out, "    fix:      ", &text);
        assert!(out.lines().all(|l| l.len() <= 80), "{out}");
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(words(&out)[1..], words(&text)[..]);
        let mut out = String::new();
        st.wrap(
            &mut out,
            "    fix:      ",
            &format!("{} `echo 200000 > /sys/module/x`", "word ".repeat(12)),
        );
        assert!(out.contains("`echo 200000 > /sys/module/x`"), "{out}");
        let mut out = String::new();
        let items: Vec<String> = (0..20).map(|i| format!("key_{i}=value {i}")).collect();
        st.items(&mut out, "    evidence: ", &items, ", ");
        assert!(out.lines().all(|l| l.len() <= 80), "{out}");
        for i in &items {
            assert!(out.contains(i.as_str()), "{i} split: {out}");
        }
    }
}
