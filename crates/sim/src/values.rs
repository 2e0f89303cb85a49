//! Numbers a scenario file may hold, each checked while it is read so the
//! TOML parser can point at the offending value; and [`map_to`], for the
//! hand-written Deserialize of a demand.

use serde::de::{self, MapAccess};
use serde::Deserialize;

/// A number > 0.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Positive(pub f64);

impl TryFrom<f64> for Positive {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if v.is_finite() && v > 0.0 {
            Ok(Positive(v))
        } else {
            Err(format!("must be a number above 0, got {v}"))
        }
    }
}

/// A number >= 0.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(try_from = "f64")]
pub struct NonNeg(pub f64);

impl TryFrom<f64> for NonNeg {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if v.is_finite() && v >= 0.0 {
            Ok(NonNeg(v))
        } else {
            Err(format!("must be 0 or more, got {v}"))
        }
    }
}

/// A share of a CPU or a probability, within [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(try_from = "f64")]
pub struct Fraction(pub f64);

impl TryFrom<f64> for Fraction {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if (0.0..=1.0).contains(&v) {
            Ok(Fraction(v))
        } else {
            Err(format!("must be within [0, 1], got {v}"))
        }
    }
}

/// A whole number >= 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "i64")]
pub struct Count(pub u32);

impl TryFrom<i64> for Count {
    type Error = String;
    fn try_from(v: i64) -> Result<Self, String> {
        if (1..=1 << 20).contains(&v) {
            Ok(Count(v as u32))
        } else {
            Err(format!(
                "must be a whole number from 1 to {}, got {v}",
                1 << 20
            ))
        }
    }
}

/// A cpu cgroup weight in cgroup v1 units (cpu.shares, [2, 262144]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "i64")]
pub struct Weight(pub u64);

impl TryFrom<i64> for Weight {
    type Error = String;
    fn try_from(v: i64) -> Result<Self, String> {
        if (2..=262_144).contains(&v) {
            Ok(Weight(v as u64))
        } else {
            Err(format!(
                "must be a cpu.shares value within [2, 262144], got {v}"
            ))
        }
    }
}

/// Reads the table form of a demand through serde (used by `Demand`'s
/// hand-written Deserialize, which also takes "busy", "idle" and numbers).
pub(crate) fn map_to<'de, T: Deserialize<'de>, A: MapAccess<'de>>(map: A) -> Result<T, A::Error> {
    T::deserialize(de::value::MapAccessDeserializer::new(map))
}
