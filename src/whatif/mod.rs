//! What-ifs: drive the simulator over variants of a scenario and say what each would buy.
//! `spec_decode` (speculative decoding: draft and verify passes on the same engine).

pub mod acceptance;
pub mod draft;
pub mod spec_decode;
pub mod sweep;
pub mod uncertainty;
pub mod vary;

use crate::error::{Error, Result};

/// Parses `--flag` values given as a list (`1,2,4`), a range (`1..6` or `1..=6`, both ends
/// included) or a mix (`1..4,8,16`), naming the flag and the allowed range on error.
pub(crate) fn parse_u32_list(
    flag: &str,
    text: &str,
    allowed: std::ops::RangeInclusive<u32>,
) -> Result<Vec<u32>> {
    let bad = |what: &str| Error::FlagList {
        flag: flag.to_string(),
        text: text.to_string(),
        problem: what.to_string(),
        expected: format!(
            "numbers in {}..={} as a list 1,2,4 or a range 1..6 / 1..=6",
            allowed.start(),
            allowed.end()
        ),
    };
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| bad(&format!("'{}' is not a whole number", s.trim())))
    };
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (lo, hi) = match part.split_once("..") {
            Some((a, b)) => (num(a)?, num(b.trim_start_matches('='))?),
            None => {
                let v = num(part)?;
                (v, v)
            }
        };
        if lo > hi {
            return Err(bad(&format!("range {lo}..{hi} is empty")));
        }
        for v in [lo, hi] {
            if !allowed.contains(&v) {
                return Err(bad(&format!("{v} is out of range")));
            }
        }
        if (hi - lo) as usize + out.len() > 1_000_000 {
            return Err(bad("more than 1,000,000 values"));
        }
        out.extend(lo..=hi);
    }
    if out.is_empty() {
        return Err(bad("no values"));
    }
    Ok(out)
}

/// Parses a comma list of fractions (`0.8,0.6,0.4`), naming the flag on error.
pub(crate) fn parse_f64_list(flag: &str, text: &str) -> Result<Vec<f64>> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim().parse::<f64>().map_err(|_| Error::FlagList {
                flag: flag.to_string(),
                text: text.to_string(),
                problem: format!("'{}' is not a number", p.trim()),
                expected: "a comma list such as 0.8,0.6,0.4".into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        assert_eq!(
            parse_u32_list("--k", "1..6", 0..=8).unwrap(),
            vec![1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            parse_u32_list("--k", "0..=2,5", 0..=8).unwrap(),
            vec![0, 1, 2, 5]
        );
        assert!(parse_u32_list("--k", "1..9", 0..=8).is_err());
        assert!(parse_u32_list("--k", "x", 0..=8).is_err());
        assert!(parse_u32_list("--k", "3..1", 0..=8).is_err());
    }
}
