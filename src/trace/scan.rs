//! A streaming scanner over JSON text: it finds where the next JSON value ends without building
//! it, refilling from the reader as needed. The parser uses it to walk the top-level object and
//! the `traceEvents` array one event at a time, so memory stays bounded by the largest single
//! event (not the file) and events of unwanted categories are never decoded at all.
//!
//! The scanner only balances brackets and skips strings; it does not validate. Values it hands
//! out are validated by serde_json when (and only when) they are decoded.

use std::io::Read;

const CHUNK: usize = 1 << 20;

/// Why a scan stopped early.
#[derive(Debug)]
pub(crate) enum ScanError {
    Io(std::io::Error),
    /// The input ended inside a value.
    Eof,
    /// A byte that cannot start or continue the structure here.
    Unexpected(u8),
}

pub(crate) struct Input<R> {
    reader: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    /// Bytes dropped from the front of `buf` so far: `dropped + pos` is the absolute offset.
    dropped: u64,
}

impl<R: Read> Input<R> {
    pub(crate) fn new(reader: R) -> Self {
        Input {
            reader,
            buf: Vec::with_capacity(CHUNK * 2),
            pos: 0,
            eof: false,
            dropped: 0,
        }
    }

    /// Absolute offset of the cursor in the (decompressed) JSON text.
    pub(crate) fn offset(&self) -> u64 {
        self.dropped + self.pos as u64
    }

    /// Drops consumed bytes and reads one more chunk. Returns false at end of input.
    fn fill(&mut self) -> Result<bool, ScanError> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.dropped += self.pos as u64;
            self.pos = 0;
        }
        let old = self.buf.len();
        self.buf.resize(old + CHUNK, 0);
        let mut filled = old;
        // Read until the chunk is full or the reader is exhausted: gzip readers return short
        // reads, and a few large reads are cheaper than many small ones.
        while filled < self.buf.len() {
            match self.reader.read(&mut self.buf[filled..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(filled);
                    return Err(ScanError::Io(e));
                }
            }
        }
        self.buf.truncate(filled);
        Ok(filled > old)
    }

    /// Skips whitespace and returns the next byte without consuming it; `None` at end of input.
    pub(crate) fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            while self.pos < self.buf.len() {
                let b = self.buf[self.pos];
                if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    self.pos += 1;
                } else {
                    return Ok(Some(b));
                }
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Consumes one byte (after `peek` returned it).
    pub(crate) fn bump(&mut self) {
        self.pos += 1;
    }

    /// Skips a leading UTF-8 byte-order mark, which some tools write.
    pub(crate) fn skip_bom(&mut self) -> Result<(), ScanError> {
        while self.buf.len() - self.pos < 3 && self.fill()? {}
        if self.buf[self.pos..].starts_with(&[0xEF, 0xBB, 0xBF]) {
            self.pos += 3;
        }
        Ok(())
    }

    /// Finds the end of the JSON value that starts at the cursor and returns it as a slice,
    /// consuming it. The slice is valid until the next call.
    pub(crate) fn next_value(&mut self) -> Result<&[u8], ScanError> {
        let len = self.value_len()?;
        let start = self.pos;
        self.pos += len;
        Ok(&self.buf[start..start + len])
    }

    fn value_len(&mut self) -> Result<usize, ScanError> {
        let first = match self.peek()? {
            Some(b) => b,
            None => return Err(ScanError::Eof),
        };
        // `i` is relative to `pos`, which `fill` may move, so the scan resumes after a refill.
        let mut i = 1usize;
        match first {
            b'{' | b'[' => {
                let mut depth = 1u32;
                loop {
                    let buf = &self.buf[self.pos..];
                    while i < buf.len() {
                        match buf[i] {
                            b'"' => match string_end(&buf[i + 1..]) {
                                Some(n) => i += n + 2,
                                None => break,
                            },
                            b'{' | b'[' => {
                                depth += 1;
                                i += 1;
                            }
                            b'}' | b']' => {
                                depth -= 1;
                                i += 1;
                                if depth == 0 {
                                    return Ok(i);
                                }
                            }
                            _ => i += 1,
                        }
                    }
                    if !self.fill()? {
                        return Err(ScanError::Eof);
                    }
                }
            }
            b'"' => loop {
                if let Some(n) = string_end(&self.buf[self.pos + 1..]) {
                    return Ok(n + 2);
                }
                if !self.fill()? {
                    return Err(ScanError::Eof);
                }
            },
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => loop {
                let buf = &self.buf[self.pos..];
                while i < buf.len() {
                    if matches!(
                        buf[i],
                        b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t' | b':'
                    ) {
                        return Ok(i);
                    }
                    i += 1;
                }
                if !self.fill()? {
                    // A scalar may legitimately end the input (top-level scalar).
                    return Ok(self.buf.len() - self.pos);
                }
            },
            b => Err(ScanError::Unexpected(b)),
        }
    }
}

/// Length of a string body (the bytes before the closing quote) in `s`, which starts just after
/// the opening quote; `None` when the closing quote is not in `s` yet.
fn string_end(s: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        let j = memchr::memchr2(b'"', b'\\', &s[i..])?;
        let at = i + j;
        if s[at] == b'"' {
            return Some(at);
        }
        // A backslash escapes the next byte; if that byte is not here yet, wait for more input.
        if at + 1 >= s.len() {
            return None;
        }
        i = at + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns one byte per call, to exercise every refill boundary.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() || out.is_empty() {
                return Ok(0);
            }
            out[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    fn values(text: &str) -> Vec<String> {
        let mut inp = Input::new(Trickle(text.as_bytes()));
        let mut out = Vec::new();
        while let Some(b) = inp.peek().unwrap() {
            if b == b',' {
                inp.bump();
                continue;
            }
            out.push(String::from_utf8(inp.next_value().unwrap().to_vec()).unwrap());
        }
        out
    }

    #[test]
    fn finds_value_ends_across_refills() {
        let v = values(r#"{"a":"x}\"y","b":[1,{"c":2}]} , "s\\", 12.5e3, true ,[[]]"#);
        assert_eq!(
            v,
            [
                r#"{"a":"x}\"y","b":[1,{"c":2}]}"#,
                r#""s\\""#,
                "12.5e3",
                "true",
                "[[]]"
            ]
        );
    }

    #[test]
    fn truncated_value_is_eof() {
        let mut inp = Input::new(Trickle(br#"{"a": [1, 2"#));
        assert!(matches!(inp.next_value(), Err(ScanError::Eof)));
        let mut inp = Input::new(Trickle(br#""abc\"#));
        assert!(matches!(inp.next_value(), Err(ScanError::Eof)));
    }
}
