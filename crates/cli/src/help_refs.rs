//! Every file a help text or a document names exists in the repository:
//! `serve --help` once cited a SPEC.md that was never there. A test only.

use clap::CommandFactory;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Top-level folders a repository path starts with.
const TOP: &[&str] = &[
    "crates/",
    "docs/",
    "deploy/",
    "fixtures/",
    "scripts/",
    "testenv/",
    "scenarios/",
    "schemas/",
    "bench/",
];

/// Path-like words of `text`: a word of path characters that starts with a
/// top-level folder, or a file name in capitals at the root (SPEC.md).
fn repo_paths(text: &str) -> Vec<String> {
    let is_path = |c: char| c.is_ascii_alphanumeric() || "/._-".contains(c);
    text.split(|c: char| !is_path(c))
        .map(|w| w.trim_end_matches(['.', '/']))
        .filter(|w| {
            let root_doc = w.ends_with(".md")
                && !w.contains('/')
                && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && w.trim_end_matches(".md")
                    .chars()
                    .all(|c| c.is_ascii_uppercase());
            (TOP.iter().any(|t| w.starts_with(t)) && w.contains('.')) || root_doc
        })
        .map(str::to_string)
        .collect()
}

/// Every help text: each command's and subcommand's long help.
fn help_texts() -> Vec<(String, String)> {
    fn walk(cmd: &mut clap::Command, path: String, out: &mut Vec<(String, String)>) {
        out.push((path.clone(), cmd.render_long_help().to_string()));
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        for n in names {
            if let Some(sub) = cmd.find_subcommand_mut(&n) {
                walk(sub, format!("{path} {n}"), out);
            }
        }
    }
    let mut out = Vec::new();
    let mut cmd = crate::args::Cli::command();
    cmd.build();
    walk(&mut cmd, "stealscope".into(), &mut out);
    out
}

/// Markdown links `](target)` relative to the document's folder.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|t| t.split('#').next().unwrap_or(t).to_string())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(root().join("README.md"));
    docs.sort();
    docs
}

#[test]
fn help_texts_and_docs_cite_only_files_in_the_repository() {
    let root = root();
    let mut missing = Vec::new();
    for (cmd, text) in help_texts() {
        for p in repo_paths(&text) {
            if !root.join(&p).exists() {
                missing.push(format!("`{cmd} --help` cites {p}"));
            }
        }
    }
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        for p in repo_paths(&text) {
            if !root.join(&p).exists() {
                missing.push(format!("{name} cites {p}"));
            }
        }
        for l in links(&text) {
            if !doc.parent().unwrap().join(&l).exists() {
                missing.push(format!("{name} links {l}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_scan_finds_what_it_should() {
    assert_eq!(
        repo_paths("Metrics (SPEC.md): see docs/contract.md, crates/x/src/a.rs."),
        ["SPEC.md", "docs/contract.md", "crates/x/src/a.rs"]
    );
    assert!(repo_paths("/proc/stat and place.toml").is_empty());
    assert_eq!(
        links("see [who](who-stole.md#json) and [x](https://a.b)"),
        ["who-stole.md"]
    );
}
