//! Notes in brief, for the text and HTML reports: a note per missing counter
//! becomes its reason in a few words, and notes that share a reason become
//! one line naming every subject ("cycles, instructions: no PMU in this VM
//! (...)"). The JSON keeps every note in full; `-v` prints them.

use crate::hardware::HardwareSection;

/// Splits "subject: reason" at the first ": ".
fn split(note: &str) -> Option<(&str, &str)> {
    note.split_once(": ")
        .filter(|(s, r)| !s.is_empty() && !r.is_empty())
}

/// Subjects joined, a first word they all share written once
/// ("skipped /a, /b" rather than "skipped /a, skipped /b").
fn join_subjects(subjects: &[&str]) -> String {
    let first = |s: &str| s.split_once(' ').map(|(w, _)| w.to_string());
    let shared = first(subjects[0]).filter(|w| {
        subjects
            .iter()
            .all(|s| first(s).as_deref() == Some(w.as_str()))
    });
    match shared {
        Some(w) if subjects.len() > 1 => {
            let rest: Vec<&str> = subjects.iter().map(|s| s[w.len()..].trim_start()).collect();
            format!("{w} {}", rest.join(", "))
        }
        _ => subjects.join(", "),
    }
}

/// Groups notes with the same reason into one line, in first-seen order.
pub fn group(notes: &[String]) -> Vec<String> {
    // (reason, subjects) or (whole note, none)
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for n in notes {
        match split(n) {
            Some((subject, reason)) => match groups
                .iter_mut()
                .find(|(r, s)| *r == reason && !s.is_empty())
            {
                Some((_, s)) => s.push(subject),
                None => groups.push((reason, vec![subject])),
            },
            None => groups.push((n.as_str(), Vec::new())),
        }
    }
    groups
        .into_iter()
        .map(|(reason, subjects)| match subjects.is_empty() {
            true => reason.to_string(),
            false => format!("{}: {reason}", join_subjects(&subjects)),
        })
        .collect()
}

/// The notes as the text and HTML reports show them: counters missing for
/// one reason on one line, in a few words, then every note grouped.
pub fn brief(notes: &[String], hw: Option<&HardwareSection>) -> Vec<String> {
    let missing = hw
        .and_then(|h| h.counters.as_ref())
        .map(|c| c.missing.as_slice())
        .unwrap_or_default();
    let short: Vec<String> = notes
        .iter()
        .map(|n| match missing.iter().find(|m| &m.why == n) {
            Some(m) => format!("{}: {}", m.counter, m.brief),
            None => n.clone(),
        })
        .collect();
    group(&short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_sharing_a_reason_are_one_line() {
        let notes: Vec<String> = [
            "cycles: no PMU in this VM (perf_event_open: ENOENT)",
            "skipped /a: not text",
            "instructions: no PMU in this VM (perf_event_open: ENOENT)",
            "skipped /b: not text",
            "no sample series",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            group(&notes),
            vec![
                "cycles, instructions: no PMU in this VM (perf_event_open: ENOENT)",
                "skipped /a, /b: not text",
                "no sample series"
            ]
        );
    }
}
