//! A finding: a stable id (docs/findings.md), severity, the evidence
//! (numbers and the files they came from), a remedy a person can act on, and
//! the source case it relates to.

use crate::Evidence;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub title: String,
    /// Numbers behind the verdict, by name (printed in name order);
    /// `files` lists where they were read.
    pub evidence: BTreeMap<String, Evidence>,
    pub remedy: String,
    pub references: Vec<String>,
    /// Source case the finding comes from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
}

impl Finding {
    pub fn new(id: &str, severity: Severity, title: impl Into<String>) -> Self {
        Finding {
            id: id.to_string(),
            severity,
            title: title.into(),
            evidence: BTreeMap::new(),
            remedy: String::new(),
            references: Vec::new(),
            case: None,
        }
    }

    pub fn evidence(mut self, key: &str, value: impl Into<Evidence>) -> Self {
        self.evidence.insert(key.to_string(), value.into());
        self
    }

    pub fn files(self, files: &[&str]) -> Self {
        self.evidence("files", files.to_vec())
    }

    pub fn remedy(mut self, text: impl Into<String>) -> Self {
        self.remedy = text.into();
        self
    }

    pub fn reference(mut self, r: &str) -> Self {
        self.references.push(r.to_string());
        self
    }

    pub fn case(mut self, c: &str) -> Self {
        self.case = Some(c.to_string());
        self
    }

    /// The `files` evidence as text, in order (empty when there is none).
    pub fn file_list(&self) -> Vec<String> {
        match self.evidence.get("files") {
            Some(Evidence::List(l)) => l.iter().map(crate::units::value).collect(),
            _ => Vec::new(),
        }
    }
}

/// Rounds a figure for evidence so reports do not print 17 digits (a
/// non-finite figure becomes null).
pub fn round(v: f64, digits: i32) -> Evidence {
    Evidence::from(crate::units::round(v, digits))
}
