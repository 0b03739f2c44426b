//! `sweep --grid FILE`: a TOML grid file read into the sweep's flags (the same keys, each a
//! value, a list or a range), the keys taken from the knob table and the table of methods.

use super::{request, SweepArgs};
use crate::error::{Error, Result};
use crate::scenario::knobs::{knob, Knob, Sweep, KNOBS};
use crate::whatif::draft::Method;

/// The grid keys of `sweep` itself (speculative decoding): (key, what it takes). The scenario's
/// own keys come from the knob table ([`grid_keys`]), the methods from the table of methods.
fn spec_grid_keys() -> [(&'static str, String); 5] {
    [
        (
            "draft-tokens",
            "draft tokens: 0, [0, 3] or \"0..=5\"".into(),
        ),
        (
            "method",
            Method::choices(|_| true, |m| format!("\"{}\"", m.names[0])),
        ),
        (
            "draft",
            "an EAGLE-3 draft config.json or a draft model (string)".into(),
        ),
        ("acceptance-rate", "a rate in [0, 1]".into()),
        (
            "acceptance-per-position",
            "rates: [0.8, 0.6] or \"0.8,0.6\"".into(),
        ),
    ]
}

/// A grid file's keys: (key as written in the file, what it takes). Lists take a TOML array,
/// a number or a string of the flag's own syntax (lists and ranges).
fn grid_keys() -> Vec<(&'static str, String)> {
    let scenario = KNOBS.iter().filter_map(|k| {
        let takes = match (k.sweep, k.name()) {
            (Sweep::No, _) => return None,
            (Sweep::List, "batch" | "context" | "pp" | "dp") => {
                format!("{}: 32, [1, 2, 4] or \"1..=256\"", k.expected)
            }
            (Sweep::Layout { .. }, _) if counts(k) => {
                format!("{}: 8, [2, 8, 32] or \"2,8,32\"", k.expected)
            }
            (Sweep::List, "cuda-graphs") => {
                "\"on\", \"off\", \"on,off\", true, false or [true, false]".to_string()
            }
            (Sweep::List | Sweep::Layout { .. }, _) => {
                format!("{}: one, a list [\"a\", \"b\"] or \"a,b\"", k.expected)
            }
            (Sweep::One, "tp" | "ep" | "redundant-experts") => k.expected.to_string(),
            (Sweep::One, "fuse-allreduce-rms") => "\"on\", \"off\", true or false".to_string(),
            (Sweep::One, _) => format!("{} (string)", k.expected),
        };
        Some((k.name(), takes))
    });
    scenario.chain(spec_grid_keys()).collect()
}

/// A knob whose values are written as numbers (`N`, `BYTES`): a grid file gives them as
/// TOML integers.
fn counts(k: &Knob) -> bool {
    !k.value_name
        .chars()
        .any(|c| c.is_ascii_lowercase() || c == '|')
}

/// A knob switched on or off: a grid file may give it as a TOML boolean.
fn switch(k: &Knob) -> bool {
    k.value_name == "on|off"
}

/// One value in the flags' syntax: strings as written, numbers and booleans (on/off for
/// cuda-graphs) as text, arrays joined with commas.
fn flag_text(key: &str, v: &toml::Value) -> Option<String> {
    use toml::Value as V;
    match v {
        V::String(s) => Some(s.clone()),
        V::Integer(i) => Some(i.to_string()),
        V::Float(f) => Some(f.to_string()),
        V::Boolean(b)
            if matches!(key, "cuda-graphs" | "fuse-allreduce-rms")
                || crate::scenario::knobs::find(key)
                    .is_some_and(|k| k.sweep.is_layout() && switch(k)) =>
        {
            Some(if *b { "on" } else { "off" }.into())
        }
        V::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                V::Array(_) => None,
                other => flag_text(key, other),
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(",")),
        _ => None,
    }
}

/// How a knob is swept (None: `key` is not a knob).
fn knob_sweep(key: &str) -> Option<Sweep> {
    crate::scenario::knobs::find(key).map(|k| k.sweep)
}

/// Long because: one arm per key a grid file sets; split, the keys and the kinds of value each
/// takes would scatter across functions.
///
/// Sets the flag `key` of `a` from its text; false when the value has the wrong kind.
fn set_flag(a: &mut SweepArgs, key: &str, v: &toml::Value) -> Result<bool> {
    let list_key = matches!(key, "draft-tokens" | "acceptance-per-position")
        || matches!(knob_sweep(key), Some(Sweep::List | Sweep::Layout { .. }));
    if !list_key && matches!(v, toml::Value::Array(_)) {
        return Ok(false);
    }
    let Some(text) = flag_text(key, v) else {
        return Ok(false);
    };
    let is_str = matches!(v, toml::Value::String(_));
    // A layout setting: a string or a list, an integer where it counts, a boolean where it is
    // a switch.
    if let Some(k) = crate::scenario::knobs::find(key).filter(|k| k.sweep.is_layout()) {
        let fits = match v {
            toml::Value::String(_) | toml::Value::Array(_) => true,
            toml::Value::Integer(_) => counts(k),
            toml::Value::Boolean(_) => switch(k),
            _ => false,
        };
        if fits {
            a.layout_axes.set(k, text);
        }
        return Ok(fits);
    }
    match key {
        "model" | "system" | "calibration" | "kv-cache-dtype" | "method" | "draft" if !is_str => {
            return Ok(false)
        }
        "model" => a.model = text,
        "system" => a.system = text,
        "calibration" => a.calibration = Some(text),
        "kv-cache-dtype" => {
            if knob(key).parse_value(&text).is_err() {
                return Ok(false);
            }
            a.kv_cache_dtype = text
        }
        "method" => a.method = text,
        "draft" => a.draft = Some(text),
        "tp" => match v {
            toml::Value::Integer(i) if (1..=1024).contains(i) => a.tp = Some(*i as u32),
            _ => return Ok(false),
        },
        "pp" => match v {
            toml::Value::Integer(_) | toml::Value::String(_) | toml::Value::Array(_) => {
                a.pp = Some(text)
            }
            _ => return Ok(false),
        },
        "dp" => match v {
            toml::Value::Integer(_) | toml::Value::String(_) | toml::Value::Array(_) => {
                a.dp = Some(text)
            }
            _ => return Ok(false),
        },
        "ep" => match v {
            toml::Value::Integer(i) if (1..=1 << 20).contains(i) => a.ep = Some(*i as u32),
            _ => return Ok(false),
        },
        "redundant-experts" => match v {
            toml::Value::Integer(i) if (0..=1 << 20).contains(i) => {
                a.redundant_experts = Some(*i as u32)
            }
            _ => return Ok(false),
        },
        "fuse-allreduce-rms" => {
            if knob(key).parse_value(&text).is_err() {
                return Ok(false);
            }
            a.fuse_allreduce_rms = Some(text)
        }
        "ep-comm" if !is_str => return Ok(false),
        "ep-comm" => {
            if knob(key).parse_value(&text).is_err() {
                return Ok(false);
            }
            a.ep_comm = Some(text)
        }
        "acceptance-rate" => match v {
            toml::Value::Float(_) | toml::Value::Integer(_) => {
                a.acceptance_rate = text.parse().ok()
            }
            _ => return Ok(false),
        },
        "batch" => a.batch = text,
        "context" => a.context = text,
        "nccl-proto" => a.nccl_proto = text,
        "nccl-algo" => a.nccl_algo = text,
        "cuda-graphs" => a.cuda_graphs = text,
        "draft-tokens" => a.draft_tokens = text,
        "acceptance-per-position" => a.acceptance_per_position = Some(text),
        _ => unreachable!("keys are checked against grid_keys() first"),
    }
    Ok(true)
}

/// Reads a `--grid` file into the flags it stands for (every other flag at its default), each
/// key checked on its own so that an error names the file, the key and what it takes.
pub(super) fn grid_args(path: &std::path::Path, defaults: &SweepArgs) -> Result<SweepArgs> {
    let text = crate::files::read_text(path, crate::files::InputKind::SweepGrid)?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| Error::Syntax {
        path: path.to_path_buf(),
        format: "TOML",
        message: e.to_string().trim_end().to_string(),
    })?;
    let keys = grid_keys();
    let allowed = || keys.iter().map(|k| k.0).collect::<Vec<_>>().join(", ");
    let rate = |k: &str| table.contains_key(k) || table.contains_key(&k.replace('-', "_"));
    if rate("acceptance-rate") && rate("acceptance-per-position") {
        return Err(Error::field(
            path,
            "acceptance-per-position",
            "give either acceptance-rate or acceptance-per-position, not both",
        ));
    }
    let mut base = defaults.clone();
    base.grid = None;
    let mut a = base.clone();
    let mut seen: Vec<(String, &str)> = Vec::new();
    for (raw, v) in &table {
        // Flags' spelling, or the same with underscores.
        let key = raw.replace('_', "-");
        // Both spellings of one key: which value was meant is unknowable.
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(Error::field(
                path,
                raw.clone(),
                format!("the key '{first}' is given too; '{first}' and '{raw}' are the same key, give it once"),
            ));
        }
        seen.push((key.clone(), raw.as_str()));
        let Some((_, takes)) = keys.iter().find(|k| k.0 == key) else {
            let what = if matches!(key.as_str(), "pareto" | "format" | "output" | "grid") {
                "is an output option, given as a flag (--pareto, --format, --output)".to_string()
            } else {
                format!("unknown key; the grid keys are {}", allowed())
            };
            return Err(Error::field(
                path,
                raw.chars().take(80).collect::<String>(),
                what,
            ));
        };
        let bad = |why: String| {
            Error::field(
                path,
                raw.clone(),
                format!("{} {why}", crate::units::echo(&v.to_string())),
            )
        };
        let mut one = base.clone();
        if !set_flag(&mut one, &key, v)? {
            return Err(bad(format!("is not allowed: expected {takes}")));
        }
        // The key alone through the flags' own checks (ranges, names, limits).
        if let Err(e) = request(&one) {
            return Err(bad(format!("is not allowed: {e}")));
        }
        set_flag(&mut a, &key, v)?;
    }
    Ok(a)
}
