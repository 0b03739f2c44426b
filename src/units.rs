//! One unit style for every text report: microseconds with thousands separators, shares as
//! percentages, byte sizes as a person reads them, paths relative to where the user stands.
//! JSON and CSV carry raw numbers instead.

use std::path::Path;

/// `12345.678` → `"12,345.7"` (one decimal, thousands separated).
pub fn us(v: f64) -> String {
    grouped(v, 1)
}

/// A number with `decimals` decimals and thousands separators; non-finite values as `-`.
pub fn grouped(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = match s.find('.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s.as_str(), ""),
    };
    let mut out = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    let negative = v < 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0');
    format!("{}{out}{frac}", if negative { "-" } else { "" })
}

/// A share in [0, 1] as a percentage with one decimal.
pub fn pct(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1}%", share * 100.0)
    } else {
        "-".to_string()
    }
}

/// `s` cut to at most `n` characters, the cut marked with `…`, so no message echoes megabytes
/// of input.
pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let head: String = s.chars().take(n.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

/// Longest input value echoed in an error: a field holding a huge array or a corrupt line must
/// not flood the terminal.
const MAX_ECHO: usize = 80;

/// An input value as an error echoes it: at most [`MAX_ECHO`] characters, with its full length
/// when cut.
pub fn echo(s: &str) -> String {
    let n = s.chars().count();
    if n <= MAX_ECHO {
        s.to_string()
    } else {
        format!("{} ({n} characters)", clip(s, MAX_ECHO))
    }
}

/// Bytes as a person reads them (KiB, MiB, GiB).
pub fn bytes(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{} B", bytes.round())
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// `path` relative to the data root for bundled files (`models/kimi-k2.5.json`), else
/// relative to the current folder when it lies below it, else as given.
pub fn path(p: &Path) -> String {
    crate::bundle::display(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated() {
        assert_eq!(us(68_912.345), "68,912.3");
        assert_eq!(us(999.95), "1,000.0");
        assert_eq!(us(12.0), "12.0");
        assert_eq!(us(-1234.5), "-1,234.5");
        assert_eq!(grouped(1_524.0, 0), "1,524");
        assert_eq!(us(f64::NAN), "-");
    }

    #[test]
    fn long_values_are_cut_and_marked() {
        assert_eq!(clip("abcdef", 6), "abcdef");
        assert_eq!(clip("abcdef", 4), "abc…");
        let e = echo(&"x".repeat(1000));
        assert!(
            e.chars().count() < 120 && e.ends_with("(1000 characters)"),
            "{e}"
        );
    }
}
