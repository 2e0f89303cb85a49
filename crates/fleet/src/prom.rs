//! The Prometheus HTTP API, instant queries only (`/api/v1/query`): what
//! federation, Thanos and Mimir all answer. A subquery (`expr[1h:5m]`)
//! gives a history in one instant query, so no range queries are needed.
//!
//! HTTP client: ureq, blocking and small, built without its TLS stack (a
//! Prometheus is reached over plain HTTP, here on loopback). The workspace's
//! hyper is built as a server only and would need a tokio runtime for one
//! request at a time; ureq needs neither.

use crate::error::FleetError;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Labels of one series.
pub type Labels = BTreeMap<String, String>;

/// One series of an answer: a sample (instant vector) or samples (matrix).
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: Labels,
    /// (unix seconds, value).
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
    /// The last value (an instant vector's one sample).
    pub fn value(&self) -> f64 {
        self.points.last().map_or(f64::NAN, |p| p.1)
    }
}

/// What one query cost, as the client timed it and Prometheus counted it.
#[derive(Debug, Clone, Serialize)]
pub struct QueryCost {
    pub name: &'static str,
    pub expr: String,
    pub seconds: f64,
    pub series: usize,
    /// Samples Prometheus read (`stats.samples.totalQueryableSamples`).
    pub samples: Option<u64>,
    pub bytes: usize,
}

pub struct Prom {
    base: String,
    agent: ureq::Agent,
    timeout: Duration,
    /// Evaluation time (unix seconds); None: Prometheus's now.
    pub at: Option<f64>,
    pub costs: Vec<QueryCost>,
}

/// Answers of at most this size are read (a 150,000-VM fleet's histories
/// are a few hundred MB of JSON).
const BODY_LIMIT: u64 = 4 << 30;

impl Prom {
    pub fn new(url: &str, timeout: Duration) -> Result<Prom, FleetError> {
        let base = url.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(FleetError::Url(url.to_string()));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Prom {
            base,
            agent,
            timeout,
            at: None,
            costs: Vec::new(),
        })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// Runs `expr`; a query Prometheus refuses, a timeout or an unreachable
    /// server is an error naming the query.
    pub fn query(&mut self, name: &'static str, expr: &str) -> Result<Vec<Series>, FleetError> {
        let t0 = Instant::now();
        let url = format!("{}/api/v1/query", self.base);
        let mut req = self
            .agent
            .get(&url)
            .query("query", expr)
            .query("stats", "all")
            .query("timeout", format!("{}s", self.timeout.as_secs().max(1)));
        if let Some(at) = self.at {
            req = req.query("time", format!("{at:.3}"));
        }
        let body = req
            .call()
            .and_then(|mut r| {
                let status = r.status().as_u16();
                let text = r
                    .body_mut()
                    .with_config()
                    .limit(BODY_LIMIT)
                    .read_to_string()?;
                Ok((status, text))
            })
            .map_err(|e| self.transport(name, e))?;
        let (status, text) = body;
        let v: Value = serde_json::from_str(&text).map_err(|e| FleetError::Answer {
            query: name,
            reason: format!("HTTP {status}, not JSON: {e}"),
        })?;
        if v["status"] != "success" {
            let msg = v["error"].as_str().unwrap_or("no error text");
            let timeout = v["errorType"] == "timeout" || msg.contains("context deadline");
            return Err(if timeout {
                FleetError::Timeout {
                    url: self.base.clone(),
                    query: name,
                    secs: self.timeout.as_secs_f64(),
                }
            } else {
                FleetError::Refused {
                    query: name,
                    reason: format!("HTTP {status}: {msg}"),
                }
            });
        }
        let series = parse_result(name, &v["data"])?;
        self.costs.push(QueryCost {
            name,
            expr: expr.to_string(),
            seconds: t0.elapsed().as_secs_f64(),
            series: series.len(),
            samples: v["data"]["stats"]["samples"]["totalQueryableSamples"].as_u64(),
            bytes: text.len(),
        });
        Ok(series)
    }

    fn transport(&self, query: &'static str, e: ureq::Error) -> FleetError {
        match e {
            ureq::Error::Timeout(_) => FleetError::Timeout {
                url: self.base.clone(),
                query,
                secs: self.timeout.as_secs_f64(),
            },
            e => FleetError::Unreachable {
                url: self.base.clone(),
                reason: e.to_string(),
            },
        }
    }
}

fn num(query: &'static str, v: &Value) -> Result<(f64, f64), FleetError> {
    let bad = || FleetError::Answer {
        query,
        reason: format!("bad sample {v}"),
    };
    let t = v[0].as_f64().ok_or_else(bad)?;
    let x = v[1].as_str().ok_or_else(bad)?;
    // "NaN", "+Inf" parse; a value that is not a number is an answer we
    // cannot read.
    let x: f64 = x.parse().map_err(|_| bad())?;
    Ok((t, x))
}

fn parse_result(query: &'static str, data: &Value) -> Result<Vec<Series>, FleetError> {
    let kind = data["resultType"].as_str().unwrap_or("");
    let Some(result) = data["result"].as_array() else {
        return Err(FleetError::Answer {
            query,
            reason: format!("no result list (resultType {kind:?})"),
        });
    };
    let mut out = Vec::with_capacity(result.len());
    for r in result {
        let labels: Labels = r["metric"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let points = match kind {
            "vector" => vec![num(query, &r["value"])?],
            "matrix" => r["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| num(query, p))
                .collect::<Result<_, _>>()?,
            other => {
                return Err(FleetError::Answer {
                    query,
                    reason: format!("resultType {other:?}, expected vector or matrix"),
                })
            }
        };
        out.push(Series { labels, points });
    }
    Ok(out)
}
