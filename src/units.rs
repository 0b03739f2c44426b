//! One unit style for every text report: microseconds with thousands separators, shares as
//! percentages, byte sizes as a person reads them, paths relative to where the user stands.
//! JSON and CSV carry raw numbers instead.

use std::path::Path;

/// `12345.678` → `"12,345.7"` (one decimal, thousands separated).
pub(crate) fn us(v: f64) -> String {
    grouped(v, 1)
}

/// A number with `decimals` decimals and thousands separators; non-finite values as `-`.
pub(crate) fn grouped(v: f64, decimals: usize) -> String {
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
pub(crate) fn pct(share: f64) -> String {
    if share.is_finite() {
        format!("{:.1}%", share * 100.0)
    } else {
        "-".to_string()
    }
}

/// `s` cut to at most `n` characters, the cut marked with `…`, so no message echoes megabytes
/// of input.
pub(crate) fn clip(s: &str, n: usize) -> String {
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
pub(crate) fn echo(s: &str) -> String {
    let n = s.chars().count();
    if n <= MAX_ECHO {
        s.to_string()
    } else {
        format!("{} ({n} characters)", clip(s, MAX_ECHO))
    }
}

/// Bytes as a person reads them (KiB, MiB, GiB).
pub(crate) fn bytes(bytes: f64) -> String {
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

/// A message on one line: every run of whitespace (line breaks included) becomes one space, so
/// a warning never spills onto lines a reader (or `grep`) would take for another message.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Provenance as one line: the head of each top-level clause (`measured (AIConfigurator X)`,
/// `from 'fallback'`, `estimated`), without the long lists that follow each head's colon, so
/// the report's top says where the numbers come from in one line; the full text is kept for
/// `--verbose` and the JSON output.
pub(crate) fn provenance_summary(provenance: &str) -> String {
    let chars: Vec<char> = provenance.chars().collect();
    let matched = matched_parens(&chars);
    let mut heads: Vec<String> = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let mut head_end: Option<usize> = None;
    // One step past the end (`None`) closes the last clause.
    for (i, c) in chars.iter().copied().map(Some).chain([None]).enumerate() {
        match c {
            Some('(') if matched[i] => depth += 1,
            Some(')') if matched[i] => depth -= 1,
            Some(':') if depth == 0 && head_end.is_none() && chars.get(i + 1) == Some(&' ') => {
                head_end = Some(i)
            }
            Some(';') | None if depth == 0 || c.is_none() => {
                if let Some(e) = head_end.take() {
                    let short = clause_head(&chars[start..e], &matched[start..e]);
                    if !short.is_empty() && !heads.contains(&short) {
                        heads.push(short);
                    }
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if heads.is_empty() {
        return clip(&one_line(provenance), 100);
    }
    // One line: as many heads as fit in about 100 columns.
    let mut out = String::new();
    for h in &heads {
        if !out.is_empty() && out.chars().count() + h.chars().count() > 100 {
            out.push_str("; …");
            break;
        }
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(h);
    }
    out
}

/// Which of `chars` are parentheses with a partner. Only matched parentheses nest: a provenance
/// clipped inside an aside leaves one open, and the text from an unmatched `(` on is dropped
/// from its head.
fn matched_parens(chars: &[char]) -> Vec<bool> {
    let mut matched = vec![false; chars.len()];
    let mut open = Vec::new();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '(' => open.push(i),
            ')' => {
                if let Some(o) = open.pop() {
                    matched[o] = true;
                    matched[i] = true;
                }
            }
            _ => {}
        }
    }
    matched
}

/// One clause's head on one line, with its short asides and without its long ones.
fn clause_head(chars: &[char], matched: &[bool]) -> String {
    let mut short = String::new();
    let (mut depth, mut aside) = (0i32, String::new());
    for (&c, &m) in chars.iter().zip(matched) {
        if c == '(' && !m {
            break;
        }
        if c == '(' {
            depth += 1;
        }
        if depth > 0 {
            aside.push(c);
        } else {
            short.push(c);
        }
        if c == ')' && m {
            depth -= 1;
            if depth == 0 {
                // Long asides (a fallback's own provenance) stay for --verbose.
                if aside.chars().count() <= 40 {
                    short.push_str(&aside);
                }
                aside.clear();
            }
        }
    }
    one_line(&short)
}

/// `path` relative to the data root for bundled files (`models/kimi-k2.5.json`), else
/// relative to the current folder when it lies below it, else as given.
pub(crate) fn path(p: &Path) -> String {
    crate::bundle::display(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_summary_keeps_the_heads() {
        let p = "measured (AIConfigurator rtx_pro_6000_server): gemm.csv (2294 rows, BF16 GEMMs); \
                 moe.csv (1053 rows); from 'rtx-pro-6000-transfer' (transferred from h200-sxm \
                 measurements: kernel efficiencies; launch costs): the rest; tables collected 2026-07-25";
        assert_eq!(
            provenance_summary(p),
            "measured (AIConfigurator rtx_pro_6000_server); from 'rtx-pro-6000-transfer'"
        );
        assert_eq!(
            provenance_summary("measured (published): a; b; estimated: everything else"),
            "measured (published); estimated"
        );
        assert_eq!(provenance_summary("hand-written"), "hand-written");
        // Clipped inside an aside: the unmatched parenthesis does not swallow the rest.
        assert_eq!(
            provenance_summary("measured (X): a; from 'b' (transferred: c; from 'd' (e): f"),
            "measured (X); from 'b'; from 'd' (e)"
        );
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }

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
