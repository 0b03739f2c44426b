//! A small aligned-text table for terminal output.

pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Right-align every column but the first, unless listed in `left`.
    numeric: bool,
    /// Columns of text, aligned left.
    left: Vec<usize>,
    /// Columns wrapped at word boundaries to at most this many characters.
    wrap: Vec<(usize, usize)>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            numeric: true,
            left: Vec::new(),
            wrap: Vec::new(),
        }
    }

    /// Aligns these columns left (text rather than numbers).
    pub(crate) fn align_left(mut self, cols: &[usize]) -> Self {
        self.left.extend_from_slice(cols);
        self
    }

    /// Wraps column `col` at word boundaries so no line of it is wider than `width`; a word
    /// longer than that is cut.
    pub(crate) fn wrap(mut self, col: usize, width: usize) -> Self {
        self.wrap.push((col, width.max(8)));
        self
    }

    /// Adds a row; missing trailing cells are left empty.
    pub(crate) fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.header.len().max(cells.len()), String::new());
        self.rows.push(cells);
    }

    /// The physical lines of one logical row, after wrapping.
    fn lines_of(&self, cells: &[String]) -> Vec<Vec<String>> {
        let cols = self.header.len();
        let split: Vec<Vec<String>> = cells
            .iter()
            .take(cols)
            .enumerate()
            .map(|(i, c)| match self.wrap.iter().find(|(col, _)| *col == i) {
                Some(&(_, w)) => wrap_text(c, w),
                None => vec![c.clone()],
            })
            .collect();
        let height = split.iter().map(Vec::len).max().unwrap_or(1).max(1);
        (0..height)
            .map(|l| {
                split
                    .iter()
                    .map(|parts| parts.get(l).cloned().unwrap_or_default())
                    .collect()
            })
            .collect()
    }

    pub(crate) fn render(&self) -> String {
        let cols = self.header.len();
        let body: Vec<Vec<String>> = self.rows.iter().flat_map(|r| self.lines_of(r)).collect();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&body) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut text = String::new();
            for (i, c) in cells.iter().enumerate().take(cols) {
                let pad = width[i] - c.chars().count();
                if i > 0 {
                    text.push_str("  ");
                }
                if i > 0 && self.numeric && !self.left.contains(&i) {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(c);
                } else {
                    text.push_str(c);
                    text.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule, &mut out);
        for r in &body {
            line(r, &mut out);
        }
        out
    }
}

/// `text` broken at spaces into lines of at most `width` characters.
pub(crate) fn wrap_text(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let mut word: String = word.to_string();
        // A word longer than a line is cut into pieces.
        while word.chars().count() > width {
            if !cur.is_empty() {
                lines.push(std::mem::take(&mut cur));
            }
            let head: String = word.chars().take(width).collect();
            word = word.chars().skip(width).collect();
            lines.push(head);
        }
        let need = cur.chars().count() + usize::from(!cur.is_empty()) + word.chars().count();
        if !cur.is_empty() && need > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(&word);
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

pub(crate) fn pct(share: f64) -> String {
    super::units::pct(share)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(super::super::units::grouped(12345.678, 1), "12,345.7");
        assert_eq!(super::super::units::grouped(999.0, 0), "999");
        assert_eq!(super::super::units::grouped(-1234.0, 0), "-1,234");
        assert_eq!(super::super::units::grouped(0.0, 2), "0.00");
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

    #[test]
    fn long_text_wraps_within_its_column() {
        let mut t = Table::new(&["name", "description"])
            .align_left(&[1])
            .wrap(1, 10);
        t.row(vec!["a".into(), "one two three four".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[2], "a     one two");
        assert_eq!(lines[3], "      three four");
        assert_eq!(wrap_text(&"x".repeat(25), 10).len(), 3);
    }
}
