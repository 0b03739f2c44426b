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
    /// Allocated once and zeroed once: `buf[pos..end]` holds the unread text, `buf[end..]` is
    /// room for the next read (no `resize` per refill, which zeroed a megabyte each time).
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// Bytes dropped from the front of `buf` so far: `dropped + pos` is the absolute offset.
    dropped: u64,
}

impl<R: Read> Input<R> {
    pub(crate) fn new(reader: R) -> Self {
        Input {
            reader,
            buf: Vec::new(),
            pos: 0,
            end: 0,
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
            self.buf.copy_within(self.pos..self.end, 0);
            self.dropped += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        // Room for a whole chunk after what is kept: the buffer grows only for a value longer
        // than a chunk, and stays that size.
        if self.buf.len() < self.end + CHUNK {
            // `vec!` of zeros is a zeroed allocation (fresh pages, no memset), unlike `resize`.
            let mut bigger = vec![0u8; (self.end + CHUNK).max(CHUNK * 2)];
            bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = bigger;
        }
        let old = self.end;
        let limit = old + CHUNK;
        // Read until the chunk is full or the reader is exhausted: gzip readers return short
        // reads, and a few large reads are cheaper than many small ones.
        while self.end < limit {
            match self.reader.read(&mut self.buf[self.end..limit]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ScanError::Io(e)),
            }
        }
        Ok(self.end > old)
    }

    /// Skips whitespace and returns the next byte without consuming it; `None` at end of input.
    pub(crate) fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            while self.pos < self.end {
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
        while self.end - self.pos < 3 && self.fill()? {}
        if self.buf[self.pos..self.end].starts_with(&[0xEF, 0xBB, 0xBF]) {
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
                // The state is kept across refills, so each byte is scanned once.
                let mut st = Structure::open();
                loop {
                    if let Some(n) = st.scan(&self.buf[self.pos..self.end]) {
                        return Ok(n);
                    }
                    if !self.fill()? {
                        return Err(ScanError::Eof);
                    }
                }
            }
            b'"' => loop {
                if let Some(n) = string_end(&self.buf[self.pos + 1..self.end]) {
                    return Ok(n + 2);
                }
                if !self.fill()? {
                    return Err(ScanError::Eof);
                }
            },
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => loop {
                let buf = &self.buf[self.pos..self.end];
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
                    return Ok(self.end - self.pos);
                }
            },
            b => Err(ScanError::Unexpected(b)),
        }
    }
}

/// The scan of one bracketed value (an object or an array) up to its closing bracket: how many
/// bytes are done, the bracket depth there, and whether that point is inside a string (and
/// just after a backslash there). It only balances brackets outside strings; like the scanner
/// it replaces, it treats `{`/`[` and `}`/`]` alike and leaves validation to serde_json.
///
/// The hot path of trace reading: every byte of a trace passes here, most of it in events that
/// are never decoded. 64 bytes at a time, the quotes, backslashes and brackets of a block are
/// found as bit masks ([`masks`]); which bytes lie inside strings follows from the quotes by a
/// prefix XOR, and only the few brackets outside strings are then visited one by one. A block
/// holding a backslash (rare in traces: escapes) is walked byte by byte, as is the tail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Structure {
    /// Bytes of the value scanned so far (from its opening bracket).
    done: usize,
    depth: u32,
    in_string: bool,
    /// The last byte scanned was a backslash inside a string: the next byte is escaped.
    escaped: bool,
}

impl Structure {
    /// The state just after an opening bracket.
    fn open() -> Structure {
        Structure {
            done: 1,
            depth: 1,
            in_string: false,
            escaped: false,
        }
    }

    /// Scans `buf` (the value's bytes from its opening bracket, as far as they are read) from
    /// where the last call stopped. Returns the value's length once its closing bracket is
    /// found; `None` when `buf` ends first (the state then covers all of `buf`).
    fn scan(&mut self, buf: &[u8]) -> Option<usize> {
        let mut i = self.done;
        while i + 64 <= buf.len() {
            let Ok(block) = <&[u8; 64]>::try_from(&buf[i..i + 64]) else {
                break;
            };
            let m = masks(block);
            if m.backslash != 0 || self.escaped {
                // Escapes: exact, byte by byte, for this block only.
                for (k, &byte) in block.iter().enumerate() {
                    if self.step(byte) {
                        return Some(i + k + 1);
                    }
                }
            } else {
                // Bit k of `inside` is set when byte k is inside a string (an opening quote
                // counts as inside, a closing one as outside, which brackets never are).
                let mut inside = prefix_xor(m.quote);
                if self.in_string {
                    inside = !inside;
                }
                let mut brackets = (m.open | m.close) & !inside;
                while brackets != 0 {
                    let k = brackets.trailing_zeros() as usize;
                    brackets &= brackets - 1;
                    if m.open >> k & 1 == 1 {
                        self.depth += 1;
                    } else {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return Some(i + k + 1);
                        }
                    }
                }
                self.in_string = inside >> 63 == 1;
            }
            i += 64;
        }
        while i < buf.len() {
            if self.step(buf[i]) {
                return Some(i + 1);
            }
            i += 1;
        }
        self.done = i;
        None
    }

    /// One byte; true when it closes the value.
    #[inline]
    fn step(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth -= 1;
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }
}

/// Bit k set: byte k of a 64-byte block is a quote, a backslash, an opening or a closing
/// bracket.
#[derive(Debug, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

/// Bit k of the result is the XOR of bits 0..=k of `x`: set from an opening quote up to (not
/// including) its closing quote.
#[inline]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// SSE2 is part of every x86_64 CPU, so no runtime detection is needed: 16 bytes per compare.
#[cfg(target_arch = "x86_64")]
#[inline]
fn masks(block: &[u8; 64]) -> Masks {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        open: 0,
        close: 0,
    };
    // SAFETY: SSE2 is enabled on every x86_64 target (the intrinsics' only requirement), and
    // each `loadu` reads the 16 bytes at 16 * j, inside `block` (64 bytes), with no alignment
    // needed.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        // `[` and `]` are `{` and `}` with bit 5 clear: setting it matches both in one compare.
        let bit5 = _mm_set1_epi8(0x20);
        let open = _mm_set1_epi8(b'{' as i8);
        let close = _mm_set1_epi8(b'}' as i8);
        for j in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * j).cast::<__m128i>());
            let folded = _mm_or_si128(v, bit5);
            let bits = |x| (_mm_movemask_epi8(x) as u32 as u64) << (16 * j);
            m.quote |= bits(_mm_cmpeq_epi8(v, quote));
            m.backslash |= bits(_mm_cmpeq_epi8(v, backslash));
            m.open |= bits(_mm_cmpeq_epi8(folded, open));
            m.close |= bits(_mm_cmpeq_epi8(folded, close));
        }
    }
    m
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn masks(block: &[u8; 64]) -> Masks {
    masks_swar(block)
}

/// The same masks, 8 bytes at a time in plain integer arithmetic (other targets; tested on
/// all of them against the byte-by-byte definition).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn masks_swar(block: &[u8; 64]) -> Masks {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // High bit of each byte of `w` equal to `b`: exact per byte (no borrow crosses bytes).
    let eq = |w: u64, b: u8| {
        let x = w ^ (ONES * b as u64);
        !(((x & LOW7).wrapping_add(LOW7)) | x) & !LOW7
    };
    // The 8 high bits gathered into one byte (distinct partial products: no carries).
    let gather = |hi: u64| (hi >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        open: 0,
        close: 0,
    };
    for (j, word) in block.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let w = u64::from_le_bytes(bytes);
        let folded = w | (ONES * 0x20);
        m.quote |= gather(eq(w, b'"')) << (8 * j);
        m.backslash |= gather(eq(w, b'\\')) << (8 * j);
        m.open |= gather(eq(folded, b'{')) << (8 * j);
        m.close |= gather(eq(folded, b'}')) << (8 * j);
    }
    m
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

    /// Hands out at most `n` bytes per read, so refills fall inside and across 64-byte blocks.
    struct Chunks<'a>(&'a [u8], usize);
    impl Read for Chunks<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(out.len()).min(self.0.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// The scanner this one replaced, byte by byte over a complete buffer: the definition the
    /// block scan must agree with.
    fn reference_len(buf: &[u8]) -> Option<usize> {
        let (mut depth, mut i) = (1u32, 1usize);
        while i < buf.len() {
            match buf[i] {
                b'"' => i += string_end(&buf[i + 1..])? + 2,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' => {
                    depth -= 1;
                    i += 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => i += 1,
            }
        }
        None
    }

    /// Deterministic bytes rich in what the scan cares about: quotes, backslashes, brackets of
    /// both kinds, long plain runs (so whole blocks pass without a hit) and non-ASCII bytes.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut out = vec![b'{'];
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = match x % 23 {
                0..=2 => b'"',
                3 => b'\\',
                4 => b'{',
                5 => b'[',
                6 => b'}',
                7 => b']',
                8 => 0xC3,
                9 => {
                    out.extend(std::iter::repeat_n(b'a', (x >> 8) as usize % 150));
                    b'a'
                }
                _ => b"az:, 09.|;;-"[(x >> 8) as usize % 12],
            };
            out.push(b);
        }
        out
    }

    #[test]
    fn block_masks_match_their_definition() {
        for seed in 0..200 {
            let bytes = noise(seed, 64);
            let block: &[u8; 64] = bytes[..64].try_into().unwrap();
            let mut want = Masks {
                quote: 0,
                backslash: 0,
                open: 0,
                close: 0,
            };
            for (k, &b) in block.iter().enumerate() {
                let bit = 1u64 << k;
                match b {
                    b'"' => want.quote |= bit,
                    b'\\' => want.backslash |= bit,
                    b'{' | b'[' => want.open |= bit,
                    b'}' | b']' => want.close |= bit,
                    _ => {}
                }
            }
            assert_eq!(masks(block), want, "seed {seed}");
            assert_eq!(masks_swar(block), want, "seed {seed}");
        }
    }

    #[test]
    fn block_scan_agrees_with_the_byte_scan_at_every_refill_size() {
        let mut ended = 0;
        for seed in 0..400 {
            let bytes = noise(seed, 40 + (seed as usize * 37) % 700);
            let want = reference_len(&bytes);
            ended += want.is_some() as usize;
            let mut whole = Structure::open();
            assert_eq!(whole.scan(&bytes), want, "seed {seed}");
            for n in [1, 7, 63, 64, 65, 200] {
                let mut inp = Input::new(Chunks(&bytes, n));
                let got = inp.next_value().map(|v| v.len()).ok();
                assert_eq!(got, want, "seed {seed}, reads of {n} bytes");
            }
        }
        // The noise must exercise both outcomes, or the comparison proves little.
        assert!(ended > 40 && ended < 360, "{ended} of 400 values closed");
    }

    #[test]
    fn a_value_longer_than_a_chunk_is_found_whole() {
        let mut text = String::from(r#"{"name":""#);
        text.extend(std::iter::repeat_n('x', 3 * CHUNK));
        text.push_str(r#"}]","args":{"a":[1,2]}} ,[]"#);
        let mut inp = Input::new(text.as_bytes());
        let v = inp.next_value().unwrap();
        assert_eq!(v.len(), text.len() - 4);
        assert!(v.ends_with(br#"[1,2]}}"#));
        assert_eq!(inp.peek().unwrap(), Some(b','));
    }
}
