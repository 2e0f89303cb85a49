//! A finding: a stable id from SPEC.md, severity, the evidence (numbers and
//! the files they came from), a remedy a person can act on, and the source
//! case it relates to.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
    /// Numbers behind the verdict; `files` lists where they were read.
    pub evidence: Map<String, Value>,
    pub remedy: String,
    pub references: Vec<String>,
    /// Source case in shared/sources the finding comes from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
}

impl Finding {
    pub fn new(id: &str, severity: Severity, title: impl Into<String>) -> Self {
        Finding {
            id: id.to_string(),
            severity,
            title: title.into(),
            evidence: Map::new(),
            remedy: String::new(),
            references: Vec::new(),
            case: None,
        }
    }

    pub fn evidence(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.evidence.insert(key.to_string(), value.into());
        self
    }

    pub fn files(self, files: &[&str]) -> Self {
        self.evidence(
            "files",
            files.iter().map(|f| Value::from(*f)).collect::<Vec<_>>(),
        )
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
}

/// Rounds for evidence so reports do not print 17 digits.
pub fn round(v: f64, digits: i32) -> Value {
    let f = 10f64.powi(digits);
    serde_json::Number::from_f64((v * f).round() / f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}
