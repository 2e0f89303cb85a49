//! One piece of evidence: a number, a string, a flag, a list or a map of
//! them, or null (not known). It serializes exactly as the equivalent JSON
//! value (maps in key order), so a report reads the same however it was
//! built.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Default)]
pub enum Evidence {
    #[default]
    Null,
    Bool(bool),
    /// Whole numbers >= 0 (counts, ids, bytes).
    UInt(u64),
    /// Negative whole numbers.
    Int(i64),
    /// Always finite (a non-finite figure is Null).
    Float(f64),
    Str(String),
    List(Vec<Evidence>),
    Map(BTreeMap<String, Evidence>),
}

impl Evidence {
    /// Any serializable value (a model type, a probe's per-CPU table) as
    /// evidence, as its JSON form.
    pub fn of<T: Serialize + ?Sized>(v: &T) -> Evidence {
        serde_json::to_value(v).map_or(Evidence::Null, Evidence::from)
    }

    /// A map from (key, value) pairs.
    pub fn map<K: Into<String>, V: Into<Evidence>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Evidence::Map(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Evidence::UInt(v) => Some(v as f64),
            Evidence::Int(v) => Some(v as f64),
            Evidence::Float(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Evidence::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Evidence::Null)
    }

    /// The value under `key` of a map (None for anything else).
    pub fn get(&self, key: &str) -> Option<&Evidence> {
        match self {
            Evidence::Map(m) => m.get(key),
            _ => None,
        }
    }
}

/// A map of evidence from anything serializable (values are borrowed):
/// `evidence!{"cpu" => c.cpu, "name" => c.name, "steal_pct" => round(x, 2)}`,
/// or in `json!`'s spelling, `evidence!({"cpu": c.cpu})`.
#[macro_export]
macro_rules! evidence {
    ({ $($k:literal : $v:expr),* $(,)? }) => {
        $crate::evidence!($($k => $v),*)
    };
    ($($k:expr => $v:expr),* $(,)?) => {
        $crate::Evidence::Map(::std::collections::BTreeMap::from([
            $((::std::string::String::from($k), $crate::Evidence::of(&$v))),*
        ]))
    };
}

/// For `#[serde(serialize_with = "in_key_order")]`: `v` as its evidence form
/// prints, every object's keys in name order (as reports have always
/// printed nested model data).
pub fn in_key_order<T: Serialize, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    Evidence::of(v).serialize(s)
}

/// Compact JSON, as `serde_json::Value` prints.
impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| fmt::Error)?)
    }
}

impl Serialize for Evidence {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Evidence::Null => s.serialize_unit(),
            Evidence::Bool(b) => s.serialize_bool(*b),
            Evidence::UInt(v) => s.serialize_u64(*v),
            Evidence::Int(v) => s.serialize_i64(*v),
            Evidence::Float(v) => s.serialize_f64(*v),
            Evidence::Str(v) => s.serialize_str(v),
            Evidence::List(l) => {
                let mut seq = s.serialize_seq(Some(l.len()))?;
                for e in l {
                    seq.serialize_element(e)?;
                }
                seq.end()
            }
            Evidence::Map(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Evidence {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Evidence::from)
    }
}

/// For rules written with `serde_json::json!`: the same evidence.
impl From<serde_json::Value> for Evidence {
    fn from(v: serde_json::Value) -> Self {
        use serde_json::Value;
        match v {
            Value::Null => Evidence::Null,
            Value::Bool(b) => Evidence::Bool(b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Evidence::UInt(u),
                (None, Some(i)) => Evidence::Int(i),
                _ => n.as_f64().map_or(Evidence::Null, Evidence::from),
            },
            Value::String(s) => Evidence::Str(s),
            Value::Array(a) => Evidence::List(a.into_iter().map(Evidence::from).collect()),
            Value::Object(o) => {
                Evidence::Map(o.into_iter().map(|(k, v)| (k, Evidence::from(v))).collect())
            }
        }
    }
}

impl From<f64> for Evidence {
    fn from(v: f64) -> Self {
        if v.is_finite() {
            Evidence::Float(v)
        } else {
            Evidence::Null
        }
    }
}

impl From<f32> for Evidence {
    fn from(v: f32) -> Self {
        Evidence::from(v as f64)
    }
}

macro_rules! from_unsigned {
    ($($t:ty),*) => {$(
        impl From<$t> for Evidence {
            fn from(v: $t) -> Self {
                Evidence::UInt(v as u64)
            }
        }
    )*};
}
from_unsigned!(u8, u16, u32, u64, usize);

macro_rules! from_signed {
    ($($t:ty),*) => {$(
        impl From<$t> for Evidence {
            fn from(v: $t) -> Self {
                if v >= 0 {
                    Evidence::UInt(v as u64)
                } else {
                    Evidence::Int(v as i64)
                }
            }
        }
    )*};
}
from_signed!(i8, i16, i32, i64, isize);

impl From<bool> for Evidence {
    fn from(v: bool) -> Self {
        Evidence::Bool(v)
    }
}

impl From<String> for Evidence {
    fn from(v: String) -> Self {
        Evidence::Str(v)
    }
}

impl From<&String> for Evidence {
    fn from(v: &String) -> Self {
        Evidence::Str(v.clone())
    }
}

impl From<&str> for Evidence {
    fn from(v: &str) -> Self {
        Evidence::Str(v.to_string())
    }
}

impl<T: Into<Evidence>> From<Option<T>> for Evidence {
    fn from(v: Option<T>) -> Self {
        v.map_or(Evidence::Null, Into::into)
    }
}

impl<T: Into<Evidence>> From<Vec<T>> for Evidence {
    fn from(v: Vec<T>) -> Self {
        Evidence::List(v.into_iter().map(Into::into).collect())
    }
}

impl<T: Clone + Into<Evidence>> From<&[T]> for Evidence {
    fn from(v: &[T]) -> Self {
        Evidence::List(v.iter().cloned().map(Into::into).collect())
    }
}

impl<K: Into<String>, V: Into<Evidence>> From<BTreeMap<K, V>> for Evidence {
    fn from(m: BTreeMap<K, V>) -> Self {
        Evidence::map(m)
    }
}

/// Printed in key order like every map.
impl<K: Into<String>, V: Into<Evidence>, S> From<std::collections::HashMap<K, V, S>> for Evidence {
    fn from(m: std::collections::HashMap<K, V, S>) -> Self {
        Evidence::map(m)
    }
}

impl<T: Into<Evidence>> FromIterator<T> for Evidence {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Evidence::List(iter.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_as_the_same_json_value() {
        let cases: Vec<(Evidence, serde_json::Value)> = vec![
            (Evidence::from(3u32), json!(3u32)),
            (Evidence::from(-3i64), json!(-3i64)),
            (Evidence::from(2.5), json!(2.5)),
            (Evidence::from(5.0), json!(5.0)),
            (Evidence::from(f64::NAN), json!(null)),
            (Evidence::from(Some("x")), json!("x")),
            (Evidence::from(None::<u64>), json!(null)),
            (Evidence::from(vec![1.5, 2.0]), json!([1.5, 2.0])),
            (
                crate::evidence! {"b" => 1u8, "a" => vec!["x"], "c" => Evidence::Null},
                json!({"b": 1, "a": ["x"], "c": null}),
            ),
            (
                crate::evidence!({"n": 2.5, "s": "x"}),
                json!({"n": 2.5, "s": "x"}),
            ),
        ];
        for (e, v) in cases {
            assert_eq!(serde_json::to_string(&e).unwrap(), v.to_string());
            assert_eq!(e.to_string(), v.to_string());
            assert_eq!(Evidence::from(v.clone()), e, "{v}");
        }
    }

    #[test]
    fn of_a_struct_is_its_json_form() {
        #[derive(Serialize)]
        struct S {
            z: u32,
            a: Option<f64>,
        }
        let e = Evidence::of(&S { z: 1, a: None });
        assert_eq!(e.to_string(), r#"{"a":null,"z":1}"#);
    }
}
