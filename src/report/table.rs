//! A small aligned-text table for terminal output.

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Right-align every column but the first.
    numeric: bool,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            numeric: true,
        }
    }

    /// Adds a row; missing trailing cells are left empty.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.header.len().max(cells.len()), String::new());
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            for (i, c) in cells.iter().enumerate().take(cols) {
                let pad = width[i] - c.chars().count();
                if i > 0 {
                    out.push_str("  ");
                }
                if i > 0 && self.numeric {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(c);
                } else {
                    out.push_str(c);
                    if i + 1 < cols {
                        out.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

/// 12345.678 -> "12,345.7"
pub fn num(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i.to_string(), format!(".{f}")),
        None => (s.clone(), String::new()),
    };
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let sign = if v < 0.0 && v.abs() >= 0.5 * 10f64.powi(-(decimals as i32)) {
        "-"
    } else {
        ""
    };
    format!("{sign}{grouped}{frac}")
}

pub fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Bytes in the unit a person reads fastest.
pub fn bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(num(12345.678, 1), "12,345.7");
        assert_eq!(num(999.0, 0), "999");
        assert_eq!(num(-1234.0, 0), "-1,234");
        assert_eq!(num(0.0, 2), "0.00");
    }

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["name", "value"]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["longer".into(), "1,000".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "name    value");
        assert_eq!(lines[2], "a           1");
        assert_eq!(lines[3], "longer  1,000");
    }
}
