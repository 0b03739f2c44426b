//! Range checks shared by the spec readers. Every refusal names the file, the field (as a path
//! such as `text_config.hidden_size`), the value found and what is allowed, on one line.

use crate::error::{Error, Result};
use crate::units::grouped;
use std::ops::RangeInclusive;
use std::path::Path;

/// `1..=65536` as a person reads it: "from 1 to 65,536".
pub(crate) fn int_range_text(range: &RangeInclusive<u64>) -> String {
    format!(
        "from {} to {}",
        grouped(*range.start() as f64, 0),
        grouped(*range.end() as f64, 0)
    )
}

/// The error for an integer field outside `range` (or not an integer at all).
pub(crate) fn int_error(
    path: &Path,
    field: &str,
    found: &str,
    range: &RangeInclusive<u64>,
) -> Error {
    Error::field(
        path,
        field,
        format!(
            "found {}, expected an integer {}",
            crate::units::echo(found),
            int_range_text(range)
        ),
    )
}

/// Checks an integer already read against `range`.
pub(crate) fn int_in(path: &Path, field: &str, v: u64, range: &RangeInclusive<u64>) -> Result<u64> {
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(int_error(path, field, &v.to_string(), range))
    }
}

/// What a float must satisfy.
#[derive(Debug, Clone, Copy)]
pub struct FloatRange {
    pub(crate) min: f64,
    /// The minimum itself is refused (bandwidths, FLOP/s: a zero would divide by zero).
    min_exclusive: bool,
    pub(crate) max: f64,
    unit: &'static str,
}

impl FloatRange {
    /// Strictly positive, at most `max`.
    #[cfg(test)]
    const fn positive(max: f64, unit: &'static str) -> Self {
        FloatRange {
            min: 0.0,
            min_exclusive: true,
            max,
            unit,
        }
    }
    /// From `min` to `max`, both included: a physical floor, not only "above 0".
    pub(crate) const fn between(min: f64, max: f64, unit: &'static str) -> Self {
        FloatRange {
            min,
            min_exclusive: false,
            max,
            unit,
        }
    }
    /// Zero or more, at most `max`.
    pub(crate) const fn non_negative(max: f64, unit: &'static str) -> Self {
        FloatRange {
            min: 0.0,
            min_exclusive: false,
            max,
            unit,
        }
    }

    pub(crate) fn contains(&self, v: f64) -> bool {
        v.is_finite() && (v > self.min || (!self.min_exclusive && v == self.min)) && v <= self.max
    }

    pub(crate) fn describe(&self) -> String {
        let lo = if self.min_exclusive {
            format!("above {}", grouped_float(self.min))
        } else {
            format!("at least {}", grouped_float(self.min))
        };
        let unit = if self.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", self.unit)
        };
        format!(
            "a finite number {lo} and at most {}{unit}",
            grouped_float(self.max)
        )
    }
}

fn grouped_float(v: f64) -> String {
    if v.fract() == 0.0 {
        grouped(v, 0)
    } else {
        v.to_string()
    }
}

/// A float as a person typed it: `1e-300` and `1e308`, not 300 zeros (Rust's `{}` prints
/// every digit); ordinary magnitudes as usual (`0.5`, `450`).
pub(crate) fn show(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 || !v.is_finite() || (1e-4..1e16).contains(&a) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

/// Checks a float against `range`, naming file, field and value when it is outside.
pub(crate) fn float_in(path: &Path, field: &str, v: f64, range: &FloatRange) -> Result<f64> {
    if range.contains(v) {
        Ok(v)
    } else {
        Err(Error::field(
            path,
            field,
            format!("found {}, expected {}", show(v), range.describe()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_value_and_range() {
        let e = int_in(Path::new("m.json"), "hidden_size", 0, &(1..=65_536)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.json: field 'hidden_size': found 0, expected an integer from 1 to 65,536"
        );
        let r = FloatRange::positive(1e5, "GB/s");
        assert!(!r.contains(f64::NAN) && !r.contains(0.0) && !r.contains(f64::INFINITY));
        assert!(r.contains(1.0) && r.contains(1e5) && !r.contains(1e5 + 1.0));
        let e = float_in(Path::new("s.toml"), "bw", f64::NAN, &r).unwrap_err();
        assert!(e.to_string().contains("found NaN"), "{e}");
    }
}
