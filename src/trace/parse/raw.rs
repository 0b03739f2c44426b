//! The serde shapes of a Kineto event and the tolerant readers of its ids, numbers and strings.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::borrow::Cow;

#[derive(Deserialize)]
pub(super) struct RawEvent<'a> {
    #[serde(default, borrow)]
    pub(super) name: Option<Str<'a>>,
    #[serde(default)]
    pub(super) pid: Option<Id>,
    #[serde(default)]
    pub(super) tid: Option<Id>,
    #[serde(default)]
    pub(super) ts: Option<Num>,
    #[serde(default)]
    pub(super) dur: Option<Num>,
    #[serde(default, borrow)]
    pub(super) args: Option<RawArgs<'a>>,
}

#[derive(Deserialize)]
pub(super) struct RawArgs<'a> {
    #[serde(default)]
    pub(super) correlation: Option<Id>,
    /// Not kept (the analysis never read it), but still decoded, so that a stream that is no
    /// id (an object, an array) is refused as before.
    #[serde(default)]
    #[allow(dead_code)]
    stream: Option<Id>,
    #[serde(default)]
    pub(super) device: Option<Id>,
    #[serde(default, rename = "graph id")]
    pub(super) graph_id: Option<Id>,
    #[serde(default, borrow, rename = "Collective name")]
    pub(super) collective: Option<Str<'a>>,
    #[serde(default, borrow)]
    pub(super) category: Option<Str<'a>>,
}

#[derive(Deserialize)]
pub(super) struct OtherData {
    #[serde(default)]
    pub(super) generator: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct DistInfo {
    #[serde(default)]
    pub(super) rank: Option<Id>,
    #[serde(default)]
    pub(super) world_size: Option<Id>,
    #[serde(default)]
    pub(super) backend: Option<String>,
    #[serde(default)]
    pub(super) nccl_version: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct DeviceProp {
    #[serde(default)]
    pub(super) name: Option<String>,
}

/// A string that borrows from the input when it has no escapes.
pub(super) struct Str<'a>(pub(super) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(
                self,
                v: &'de str,
            ) -> std::result::Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// An id (correlation, stream, pid, rank): any integer, a float (ints past 2^64 arrive as
/// floats), or a string such as `"7"` or `"stream 7"`. Never an error for a scalar: ids are only
/// compared for equality, so a wrapped or hashed value is as good as the original.
#[derive(Clone, Copy)]
pub(super) struct Id(pub(super) u64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer id or a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Id, E> {
                Ok(Id(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Id, E> {
                Ok(Id(v as u64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Id, E> {
                if v.fract() == 0.0 && v.abs() < 9.0e18 {
                    Ok(Id(v as i64 as u64))
                } else {
                    Ok(Id(v.to_bits()))
                }
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Id, E> {
                Ok(Id(v as u64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Id, E> {
                Ok(Id(id_from_str(v)))
            }
        }
        d.deserialize_any(V)
    }
}

pub(super) fn id_from_str(s: &str) -> u64 {
    let t = s.trim();
    if let Ok(v) = t.parse::<i64>() {
        return v as u64;
    }
    if let Ok(v) = t.parse::<u64>() {
        return v;
    }
    // "stream 7", "GPU 0": the trailing number is the id.
    let digits = t.len() - t.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 {
        if let Ok(v) = t[t.len() - digits..].parse::<u64>() {
            return v;
        }
    }
    // FNV-1a: any other string still gets a stable id.
    t.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// A time in µs: a number, or a number written as a string.
#[derive(Clone, Copy)]
pub(super) struct Num(pub(super) f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Num, E> {
                v.trim()
                    .parse::<f64>()
                    .map(Num)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}
