//! What a VM's vCPUs want: the share of a CPU each would use if it ran
//! alone, as a function of time. Piecewise constant, so the engine can jump
//! from one change to the next.

use crate::values::{map_to, Fraction, Positive};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use stealscope_placement::synthetic::Rng;

/// "idle": what an idle guest's vCPU wants (timer ticks, housekeeping).
pub const IDLE_LEVEL: f64 = 0.03;

#[derive(Debug, Clone, PartialEq, Default)]
pub enum Demand {
    /// Always wants the whole CPU (a busy loop, stress-ng).
    #[default]
    Busy,
    /// [`IDLE_LEVEL`].
    Idle,
    Level(f64),
    /// `high` for `on_s` out of every `period_s`, else `low`.
    Bursts {
        period_s: f64,
        on_s: f64,
        high: f64,
        low: f64,
        phase_s: f64,
    },
    /// A new level every `change_s`, uniform around `mean` (per VM and seed).
    Random {
        mean: f64,
        change_s: f64,
    },
    /// A trace file as written in the scenario (read by `resolve`).
    TraceFile {
        file: String,
        step_s: f64,
        repeat: bool,
    },
    /// One level per `step_s`; after the end the trace repeats or holds its last value.
    Trace {
        levels: Arc<[f64]>,
        step_s: f64,
        repeat: bool,
    },
}

#[derive(Deserialize)]
#[serde(tag = "pattern", rename_all = "kebab-case", deny_unknown_fields)]
enum Table {
    Level {
        level: Fraction,
    },
    Bursts {
        period_s: Positive,
        on_s: Positive,
        #[serde(default = "one")]
        high: Fraction,
        #[serde(default = "zero")]
        low: Fraction,
        #[serde(default)]
        phase_s: crate::values::NonNeg,
    },
    Random {
        mean: Fraction,
        change_s: Positive,
    },
    Trace {
        file: String,
        #[serde(default = "one_s")]
        step_s: Positive,
        #[serde(default = "yes")]
        repeat: bool,
    },
}

fn one() -> Fraction {
    Fraction(1.0)
}
fn zero() -> Fraction {
    Fraction(0.0)
}
fn one_s() -> Positive {
    Positive(1.0)
}
fn yes() -> bool {
    true
}

impl<'de> Deserialize<'de> for Demand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Demand;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "\"busy\", \"idle\", a share of a CPU within [0, 1], or a table with `pattern`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Demand, E> {
                match v {
                    "busy" => Ok(Demand::Busy),
                    "idle" => Ok(Demand::Idle),
                    _ => Err(E::custom(format!(
                        "unknown demand {v:?}: expected \"busy\", \"idle\", a number within [0, 1] or {{ pattern = \"bursts\" | \"random\" | \"trace\" | \"level\", ... }}"
                    ))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Demand, E> {
                Fraction::try_from(v)
                    .map(|f| Demand::Level(f.0))
                    .map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Demand, E> {
                self.visit_f64(v as f64)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Demand, A::Error> {
                Ok(match map_to::<Table, A>(map)? {
                    Table::Level { level } => Demand::Level(level.0),
                    Table::Bursts {
                        period_s,
                        on_s,
                        high,
                        low,
                        phase_s,
                    } => {
                        if on_s.0 > period_s.0 {
                            return Err(de::Error::custom(format!(
                                "on_s = {} is longer than period_s = {}",
                                on_s.0, period_s.0
                            )));
                        }
                        Demand::Bursts {
                            period_s: period_s.0,
                            on_s: on_s.0,
                            high: high.0,
                            low: low.0,
                            phase_s: phase_s.0,
                        }
                    }
                    Table::Random { mean, change_s } => Demand::Random {
                        mean: mean.0,
                        change_s: change_s.0,
                    },
                    Table::Trace {
                        file,
                        step_s,
                        repeat,
                    } => Demand::TraceFile {
                        file,
                        step_s: step_s.0,
                        repeat,
                    },
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses a trace: one demand (share of a CPU, [0, 1]) per line, or
/// "seconds demand" per line (the first column is then ignored: lines are
/// `step_s` apart); `#` starts a comment.
pub fn parse_trace(text: &str, path: &str) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let last = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .rfind(|s| !s.is_empty())
            .unwrap_or("");
        let v: f64 = last
            .parse()
            .map_err(|_| format!("{path}: line {}: {last:?} is not a number", i + 1))?;
        if !(0.0..=1.0).contains(&v) {
            return Err(format!(
                "{path}: line {}: demand {v} is not within [0, 1]",
                i + 1
            ));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err(format!("{path}: no demand values"));
    }
    Ok(out)
}

impl Demand {
    /// Reads trace files (relative to `base`); other patterns are returned as they are.
    pub fn resolve(&self, base: &Path) -> Result<Demand, String> {
        match self {
            Demand::TraceFile {
                file,
                step_s,
                repeat,
            } => {
                let p = base.join(file);
                let text =
                    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                let levels = parse_trace(&text, &p.display().to_string())?;
                Ok(Demand::Trace {
                    levels: levels.into(),
                    step_s: *step_s,
                    repeat: *repeat,
                })
            }
            d => Ok(d.clone()),
        }
    }

    /// Share of a CPU wanted at `t`; `key` makes random levels differ per VM and seed.
    pub fn level(&self, t: f64, key: u64) -> f64 {
        match self {
            Demand::Busy => 1.0,
            Demand::Idle => IDLE_LEVEL,
            Demand::Level(l) => *l,
            Demand::Bursts {
                period_s,
                on_s,
                high,
                low,
                phase_s,
            } => {
                let x = (t + phase_s).rem_euclid(*period_s);
                if x < *on_s {
                    *high
                } else {
                    *low
                }
            }
            Demand::Random { mean, change_s } => {
                let k = (t / change_s).floor() as u64;
                let u = Rng(key ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15)).unit();
                // Uniform with the given mean, within [0, 1].
                let half = mean.min(1.0 - mean);
                mean - half + 2.0 * half * u
            }
            Demand::TraceFile { .. } => 1.0,
            Demand::Trace {
                levels,
                step_s,
                repeat,
            } => {
                let i = (t / step_s).floor().max(0.0) as usize;
                if *repeat {
                    levels[i % levels.len()]
                } else {
                    levels[i.min(levels.len() - 1)]
                }
            }
        }
    }

    /// The first time after `t` at which the level may change (infinity if never).
    pub fn next_change(&self, t: f64) -> f64 {
        let next_multiple = |step: f64, offset: f64| {
            let k = ((t + offset) / step).floor() + 1.0;
            k * step - offset
        };
        match self {
            Demand::Busy | Demand::Idle | Demand::Level(_) | Demand::TraceFile { .. } => {
                f64::INFINITY
            }
            Demand::Bursts {
                period_s,
                on_s,
                phase_s,
                ..
            } => {
                let x = (t + phase_s).rem_euclid(*period_s);
                if x < *on_s {
                    t + (on_s - x)
                } else {
                    t + (period_s - x)
                }
            }
            Demand::Random { change_s, .. } => next_multiple(*change_s, 0.0),
            Demand::Trace {
                levels,
                step_s,
                repeat,
            } => {
                if !*repeat && t >= step_s * levels.len() as f64 {
                    f64::INFINITY
                } else {
                    next_multiple(*step_s, 0.0)
                }
            }
        }
    }

    /// Mean level over one period (or the trace), for summaries.
    pub fn mean(&self) -> f64 {
        match self {
            Demand::Bursts {
                period_s,
                on_s,
                high,
                low,
                ..
            } => (high * on_s + low * (period_s - on_s)) / period_s,
            Demand::Random { mean, .. } => *mean,
            Demand::Trace { levels, .. } => levels.iter().sum::<f64>() / levels.len() as f64,
            d => d.level(0.0, 0),
        }
    }
}

/// A thread of other host work at the top level of the CPU hierarchy.
#[derive(Debug, Clone, Default)]
pub struct BackgroundThread {
    /// Pinned to this CPU, or anywhere (moved by the balancer).
    pub cpu: Option<usize>,
    pub demand: Demand,
    /// Wake-ups per second on its own timer (0: not modelled); with
    /// `queued`, the stretches it spends queued start at this rate.
    pub wakeups_per_s: f64,
    /// Measured share of the time it is queued (0: as the model gives).
    pub queued: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_change_at_their_edges() {
        let d = Demand::Bursts {
            period_s: 10.0,
            on_s: 2.0,
            high: 1.0,
            low: 0.1,
            phase_s: 0.0,
        };
        assert_eq!(d.level(1.0, 0), 1.0);
        assert_eq!(d.level(2.5, 0), 0.1);
        assert!((d.next_change(1.0) - 2.0).abs() < 1e-9);
        assert!((d.next_change(2.5) - 10.0).abs() < 1e-9);
        assert!((d.mean() - 0.28).abs() < 1e-9);
    }

    #[test]
    fn random_levels_keep_their_mean_and_range() {
        let d = Demand::Random {
            mean: 0.7,
            change_s: 1.0,
        };
        let n = 20_000;
        let levels: Vec<f64> = (0..n).map(|i| d.level(i as f64, 42)).collect();
        let mean = levels.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.7).abs() < 0.01, "{mean}");
        assert!(levels.iter().all(|l| (0.4..=1.0).contains(l)));
        assert_eq!(d.level(3.2, 42), d.level(3.9, 42));
    }

    #[test]
    fn trace_parsing_names_the_line() {
        assert_eq!(
            parse_trace("0.5\n# x\n1 0.25\n", "t").unwrap(),
            vec![0.5, 0.25]
        );
        assert_eq!(
            parse_trace("0.5\nabc\n", "t").unwrap_err(),
            "t: line 2: \"abc\" is not a number"
        );
        assert!(parse_trace("1.5\n", "t").unwrap_err().contains("line 1"));
    }
}
