//! Reports of `decodesim sweep`, streamed: one CSV row per scenario, a JSON object whose rows
//! are written element by element (the best rows and the Pareto front after them), or a short
//! summary. Rows are formatted into byte buffers with integer and fixed-point writers (no
//! `format!` per field): at a million scenarios, formatting is a large share of the work.

use super::units::{grouped, us};
use crate::category::Category;
use crate::error::{Error, Result};
use crate::scenario::{Algo, Proto};
use crate::whatif::sweep::{Meta, Output, Row, RowFormat, Summary};
use crate::whatif::uncertainty::Interval;
use std::io::Write;

/// Prices the p5/p50/p95 of tokens/s of the rows a sweep decides on (`sweep --intervals`).
pub type DecisionIntervals = Box<dyn Fn(&[Row]) -> Result<Vec<Interval>>>;

/// What the output holds besides its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Csv,
    Json,
    /// A short summary at the end (no rows).
    Summary,
}

pub fn csv_header() -> String {
    let mut h = String::from("model,system,calibration,batch,context,nccl_proto,nccl_algo,cuda_graphs,draft_tokens,mean_acceptance_length,step_time_us,tokens_per_s,tokens_per_s_per_user,fits");
    for c in Category::ALL {
        h.push(',');
        h.push_str(c.name());
        h.push_str("_busy_us");
    }
    // Appended last, so that the columns before it keep their places.
    h.push_str(",pp,dp");
    h.push('\n');
    h
}

/// Writes an unsigned integer.
#[inline]
fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Writes `v` with `decimals` digits after the point, as `format!("{v:.decimals$}")` does
/// (non-finite values as `NaN`, `inf`, `-inf`), byte for byte, with no call into `format!` but
/// for exact ties and values of 2^53 / 10^decimals or more. `format!` rounds the exact binary
/// value; so does this: y = |v| × 10^decimals is rounded once, and where its fractional part is
/// exactly one half the product's rounding error (`mul_add`, exact) tells which side of the half
/// the exact product lies (a fractional part other than a half is at least one ulp of y from
/// it, farther than the error's half ulp). Rows of table-priced busy times land on such halves
/// often (a 4-decimal table value times a layer count), which `format!` prints slowly.
#[inline]
fn push_fixed(out: &mut Vec<u8>, v: f64, decimals: u32) {
    match decimals {
        0 => push_fixed_d::<0>(out, v),
        1 => push_fixed_d::<1>(out, v),
        2 => push_fixed_d::<2>(out, v),
        3 => push_fixed_d::<3>(out, v),
        4 => push_fixed_d::<4>(out, v),
        5 => push_fixed_d::<5>(out, v),
        6 => push_fixed_d::<6>(out, v),
        _ => {
            let _ = write!(out, "{v:.*}", decimals as usize);
        }
    }
}

/// [`push_fixed`] at `D` (at most 6) decimals: the rounded value's integer and fraction
/// digits made eight at a time (`digits8`).
#[inline]
fn push_fixed_d<const D: u32>(out: &mut Vec<u8>, v: f64) {
    const POW: [f64; 7] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6];
    let scale = POW[D as usize];
    let av = v.abs();
    let y = av * scale;
    if !(y < 9.007e15) {
        let _ = write!(out, "{v:.*}", D as usize);
        return;
    }
    // Through i64 (y < 2^53): one conversion instruction each way, where u64 takes a dozen.
    let mut m = y as i64 as u64;
    let frac = y - m as i64 as f64;
    if frac > 0.5 {
        m += 1;
    } else if frac == 0.5 {
        let err = av.mul_add(scale, -y);
        if err == 0.0 {
            let _ = write!(out, "{v:.*}", D as usize);
            return;
        }
        m += (err > 0.0) as u64;
    }
    let p = 10u64.pow(D);
    let (q, r) = (m / p, m % p);
    if q >= 100_000_000 {
        push_fixed_long::<D>(out, v.is_sign_negative(), q, r);
        return;
    }
    // The integer part's eight digits with its leading zeros dropped (one kept for 0), the
    // point, the fraction's last D digits: at most 1 + 8 + 1 + 8 bytes written, as words.
    let int = digits8(q as u32);
    let lead = ((int.trailing_zeros() / 8) as usize).min(7);
    out.reserve(32);
    // SAFETY: `reserve` left at least 32 bytes of spare capacity after `len()`, and at most
    // 18 bytes are written from there; only the text's bytes are taken into the vector.
    unsafe {
        let base = out.as_mut_ptr();
        let mut at = out.len();
        if v.is_sign_negative() {
            *base.add(at) = b'-';
            at += 1;
        }
        let text = (int | ASCII_ZEROS) >> (8 * lead);
        std::ptr::write_unaligned(base.add(at) as *mut u64, text.to_le());
        at += 8 - lead;
        if D > 0 {
            *base.add(at) = b'.';
            at += 1;
            let frac = (digits8(r as u32) | ASCII_ZEROS) >> (8 * (8 - D));
            std::ptr::write_unaligned(base.add(at) as *mut u64, frac.to_le());
            at += D as usize;
        }
        out.set_len(at);
    }
}

/// Eight '0' bytes.
const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight decimal digits of `x` (below 10^8, leading zeros kept) as the bytes 0 to 9 of a
/// word, the most significant digit in its lowest byte (the first in memory, little-endian):
/// the number split in halves, quarters and digits with multiplications, all lanes at once.
/// Each lane's quotient by a multiply and shift is exact over its range (n < 10^4 by 100 with
/// 10486 / 2^20, n < 100 by 10 with 103 / 2^10), and no lane's product reaches the next lane.
#[inline(always)]
fn digits8(x: u32) -> u64 {
    let x = x as u64;
    // abcd in the low 32 bits, efgh in the high.
    let v = (x / 10_000) | ((x % 10_000) << 32);
    let hundreds = ((v * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let v = hundreds | (v - hundreds * 100) << 16;
    let tens = ((v * 103) >> 10) & 0x000f_000f_000f_000f;
    tens | (v - tens * 10) << 8
}

/// [`push_fixed_d`] with an integer part of nine digits or more: written right to left.
#[cold]
fn push_fixed_long<const D: u32>(out: &mut Vec<u8>, negative: bool, mut q: u64, mut r: u64) {
    let mut buf = [0u8; 32];
    let mut i = buf.len();
    for _ in 0..D {
        i -= 1;
        buf[i] = b'0' + (r % 10) as u8;
        r /= 10;
    }
    if D > 0 {
        i -= 1;
        buf[i] = b'.';
    }
    loop {
        i -= 1;
        buf[i] = b'0' + (q % 10) as u8;
        q /= 10;
        if q == 0 {
            break;
        }
    }
    if negative {
        i -= 1;
        buf[i] = b'-';
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends the first `len` bytes of `buf` as one fixed 32-byte move (no `memcpy` call).
#[inline(always)]
fn push_text(out: &mut Vec<u8>, buf: &[u8; 32], len: usize) {
    debug_assert!(len <= 32);
    out.reserve(32);
    // SAFETY: `reserve` left at least 32 bytes of spare capacity after `len()`; any byte is a
    // valid u8, and only the `len` bytes of text are taken into the vector.
    unsafe {
        let at = out.len();
        std::ptr::copy_nonoverlapping(buf.as_ptr(), out.as_mut_ptr().add(at), 32);
        out.set_len(at + len);
    }
}

/// A JSON number: shortest round-trip text (`ryu`), `null` for a non-finite value.
#[inline]
fn push_json_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The columns after a row's settings: acceptance length, step, tokens/s, per user, fits, the
/// busy times, pp, dp. Consecutive rows of a sweep repeat most of them (a context's rows change
/// the attention busy time and the rates only; a batch's token-dependent busy times stay put for
/// every context), so each row copies the runs of columns whose values are the last row's from
/// the last row's text and formats the others.
const NUM_COLS: usize = 4 + 1 + Category::ALL.len() + 2;

/// The last row's column values (as bits) and where its text lies in the output
/// (`Numbers::put`): two slots, the last row's and the one being written, in turn.
struct Numbers {
    has: bool,
    /// The slot of the last row.
    last: usize,
    bits: [[u64; NUM_COLS]; 2],
    /// Column c's text, its separator included, at `out[base + start[c]..base + start[c + 1]]`.
    start: [[u32; NUM_COLS + 1]; 2],
    /// Where the last row's columns begin in the output (the rows of one `csv_rows` call lie
    /// in one buffer).
    base: usize,
}

impl Numbers {
    fn new() -> Self {
        Numbers {
            has: false,
            last: 0,
            bits: [[0; NUM_COLS]; 2],
            start: [[0; NUM_COLS + 1]; 2],
            base: 0,
        }
    }

    /// Writes row `r`'s columns from the acceptance length to the end of the line.
    #[inline]
    fn put(&mut self, out: &mut Vec<u8>, r: &Row) {
        let now = 1 - self.last;
        let [b0, b1] = &mut self.bits;
        let (old_bits, bits) = if now == 1 { (&*b0, b1) } else { (&*b1, b0) };
        bits[0] = r.mean_acceptance_length.to_bits();
        bits[1] = r.step_time_us.to_bits();
        bits[2] = r.tokens_per_s.to_bits();
        bits[3] = r.tokens_per_s_per_user.to_bits();
        bits[4] = r.fits as u64;
        for (b, v) in bits[5..5 + Category::ALL.len()].iter_mut().zip(&r.busy_us) {
            *b = v.to_bits();
        }
        bits[NUM_COLS - 2] = r.pp as u64;
        bits[NUM_COLS - 1] = r.dp as u64;
        let [s0, s1] = &mut self.start;
        let (old, start) = if now == 1 { (&*s0, s1) } else { (&*s1, s0) };
        let base = out.len();
        let mut c = 0;
        while c < NUM_COLS {
            if self.has && bits[c] == old_bits[c] {
                // A run of columns as the last row wrote them, copied from its text.
                let mut e = c + 1;
                while e < NUM_COLS && bits[e] == old_bits[e] {
                    e += 1;
                }
                let at = (out.len() - base) as u32;
                for j in c..e {
                    start[j] = at + (old[j] - old[c]);
                }
                copy_within_ahead(out, self.base + old[c] as usize, (old[e] - old[c]) as usize);
                c = e;
                continue;
            }
            start[c] = (out.len() - base) as u32;
            let sep = if c + 1 == NUM_COLS { b'\n' } else { b',' };
            match c {
                4 => out.extend_from_slice(if r.fits { b"true" } else { b"false" }),
                _ if c >= NUM_COLS - 2 => push_u64(out, bits[c]),
                _ => {
                    let (v, d) = match c {
                        0 => (r.mean_acceptance_length, 4),
                        1 => (r.step_time_us, 3),
                        2 => (r.tokens_per_s, 3),
                        3 => (r.tokens_per_s_per_user, 4),
                        _ => (r.busy_us[c - 5], 3),
                    };
                    push_fixed(out, v, d);
                }
            }
            out.push(sep);
            c += 1;
        }
        start[NUM_COLS] = (out.len() - base) as u32;
        self.last = now;
        self.base = base;
        self.has = true;
    }
}

/// Appends `out[from..from + len]` (text already written, ending at or before `len()`) in
/// 32-byte words: no `memcpy` call for the short runs of a row.
#[inline(always)]
fn copy_within_ahead(out: &mut Vec<u8>, from: usize, len: usize) {
    debug_assert!(from + len <= out.len());
    out.reserve(len + 32);
    // SAFETY: `reserve` left len + 32 bytes of spare capacity, so every word written (the last
    // at most 31 bytes past the text) lies within the allocation, and so does every word read
    // (from + len ≤ len(): at most 31 bytes past, below the capacity). Each word is read whole
    // before it is written, as `MaybeUninit` (the bytes past `len()` may be uninitialised), so
    // the source's words that reach into the bytes being written are read before they change;
    // the source text itself ends before the first byte written. Only `len` bytes are taken.
    unsafe {
        let base = out.as_mut_ptr();
        let at = out.len();
        let mut k = 0;
        while k < len {
            let w = std::ptr::read_unaligned(
                base.add(from + k) as *const std::mem::MaybeUninit<[u8; 32]>
            );
            std::ptr::write_unaligned(base.add(at + k) as *mut std::mem::MaybeUninit<[u8; 32]>, w);
            k += 32;
        }
        out.set_len(at + len);
    }
}

/// The start of a row, `model,system,calibration,batch,`, kept while the batch stays.
struct Head {
    batch: Option<u32>,
    len: usize,
    text: [u8; 128],
}

impl Head {
    fn new() -> Self {
        Head {
            batch: None,
            len: 0,
            text: [0; 128],
        }
    }

    #[inline]
    fn put(&mut self, out: &mut Vec<u8>, prefix: &[u8], batch: u32) {
        let digits = itoa::Buffer::new();
        if self.batch != Some(batch) {
            let mut digits = digits;
            let b = digits.format(batch).as_bytes();
            let len = prefix.len() + b.len() + 1;
            if len > self.text.len() {
                // A long model or system name: written field by field.
                out.extend_from_slice(prefix);
                out.extend_from_slice(b);
                out.push(b',');
                return;
            }
            self.text[..prefix.len()].copy_from_slice(prefix);
            self.text[prefix.len()..len - 1].copy_from_slice(b);
            self.text[len - 1] = b',';
            self.len = len;
            self.batch = Some(batch);
        }
        out.reserve(self.text.len());
        // SAFETY: as `push_text`, with the 128-byte buffer.
        unsafe {
            let at = out.len();
            std::ptr::copy_nonoverlapping(self.text.as_ptr(), out.as_mut_ptr().add(at), 128);
            out.set_len(at + self.len);
        }
    }
}

/// The text a row's settings (protocol, algorithm, graphs, draft tokens) take, with its
/// commas, kept while they stay.
struct Settings {
    key: Option<(Proto, Algo, bool, u32)>,
    len: usize,
    text: [u8; 32],
}

impl Settings {
    #[inline]
    fn put(&mut self, out: &mut Vec<u8>, r: &Row) {
        let key = (r.proto, r.algo, r.cuda_graphs, r.draft_tokens);
        if self.key != Some(key) {
            let mut t = Vec::with_capacity(32);
            t.extend_from_slice(r.proto.name().as_bytes());
            t.push(b',');
            t.extend_from_slice(r.algo.name().as_bytes());
            t.push(b',');
            t.extend_from_slice(onoff(r.cuda_graphs).as_bytes());
            t.push(b',');
            push_u64(&mut t, r.draft_tokens as u64);
            t.push(b',');
            if t.len() > self.text.len() {
                out.extend_from_slice(&t);
                return;
            }
            self.text[..t.len()].copy_from_slice(&t);
            self.len = t.len();
            self.key = Some(key);
        }
        push_text(out, &self.text, self.len);
    }
}

/// What consecutive rows repeat, kept from row to row.
struct Kept {
    head: Head,
    settings: Settings,
    numbers: Numbers,
}

impl Kept {
    fn new() -> Self {
        Kept {
            head: Head::new(),
            settings: Settings {
                key: None,
                len: 0,
                text: [0; 32],
            },
            numbers: Numbers::new(),
        }
    }
}

/// Consecutive CSV rows, `csv_row`'s bytes for each (see [`NUM_COLS`]).
pub fn csv_rows(out: &mut Vec<u8>, prefix: &[u8], rows: &[Row]) {
    let mut kept = Kept::new();
    for r in rows {
        csv_row_with(out, prefix, r, &mut kept);
    }
}

/// One CSV row; `prefix` is `model,system,calibration,`.
pub fn csv_row(out: &mut Vec<u8>, prefix: &[u8], r: &Row) {
    csv_row_with(out, prefix, r, &mut Kept::new());
}

fn csv_row_with(out: &mut Vec<u8>, prefix: &[u8], r: &Row, kept: &mut Kept) {
    out.reserve(prefix.len() + 64 + 24 * NUM_COLS);
    kept.head.put(out, prefix, r.batch);
    push_u64(out, r.context);
    out.push(b',');
    kept.settings.put(out, r);
    kept.numbers.put(out, r);
}

/// Appends a row's two-batch-overlap setting to the row just written (`Meta::tbo`): the CSV
/// column after dp, or the JSON object's `tbo`.
fn push_tbo(out: &mut Vec<u8>, kind: Kind, r: &Row) {
    out.pop();
    if kind == Kind::Csv {
        out.extend_from_slice(if r.tbo { b",on\n" } else { b",off\n" });
    } else {
        out.extend_from_slice(if r.tbo {
            b",\"tbo\":true}"
        } else {
            b",\"tbo\":false}"
        });
    }
}

/// One row as a JSON object (no model/system: they are the document's).
pub fn json_row(out: &mut Vec<u8>, r: &Row) {
    out.extend_from_slice(b"{\"pp\":");
    push_u64(out, r.pp as u64);
    out.extend_from_slice(b",\"dp\":");
    push_u64(out, r.dp as u64);
    out.extend_from_slice(b",\"batch\":");
    push_u64(out, r.batch as u64);
    out.extend_from_slice(b",\"context\":");
    push_u64(out, r.context);
    out.extend_from_slice(b",\"nccl_proto\":\"");
    out.extend_from_slice(r.proto.name().as_bytes());
    out.extend_from_slice(b"\",\"nccl_algo\":\"");
    out.extend_from_slice(r.algo.name().as_bytes());
    out.extend_from_slice(b"\",\"cuda_graphs\":");
    out.extend_from_slice(if r.cuda_graphs { b"true" } else { b"false" });
    out.extend_from_slice(b",\"draft_tokens\":");
    push_u64(out, r.draft_tokens as u64);
    out.extend_from_slice(b",\"mean_acceptance_length\":");
    push_json_f64(out, r.mean_acceptance_length);
    out.extend_from_slice(b",\"step_time_us\":");
    push_json_f64(out, r.step_time_us);
    out.extend_from_slice(b",\"tokens_per_s\":");
    push_json_f64(out, r.tokens_per_s);
    out.extend_from_slice(b",\"tokens_per_s_per_user\":");
    push_json_f64(out, r.tokens_per_s_per_user);
    out.extend_from_slice(b",\"fits\":");
    out.extend_from_slice(if r.fits { b"true" } else { b"false" });
    out.extend_from_slice(b",\"busy_us\":{");
    for (i, c) in Category::ALL.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(c.name().as_bytes());
        out.extend_from_slice(b"\":");
        push_json_f64(out, r.busy_us[i]);
    }
    out.extend_from_slice(b"}}");
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// A sweep's output written to `w` as the rows come: CSV, JSON or the summary.
pub struct Writer<W: Write> {
    pub w: W,
    pub kind: Kind,
    /// Only the Pareto front (written at the end), not every row.
    pub pareto_only: bool,
    /// Wall-clock start, for the summary's rate.
    pub started: std::time::Instant,
    prefix: Vec<u8>,
    /// Rows written so far (the JSON array's separators).
    written: u64,
    io: fn(std::io::Error) -> Error,
    /// Intervals on the best rows and the Pareto front (`--intervals`): the rows a decision
    /// is made on, priced once the stream has chosen them.
    pub intervals: Option<DecisionIntervals>,
    /// Rows name their two-batch-overlap setting (`Meta::tbo`).
    tbo: bool,
}

impl<W: Write> Writer<W> {
    /// `io` turns a write error into the command's error (naming the file, or standard output).
    pub fn new(w: W, kind: Kind, pareto_only: bool, io: fn(std::io::Error) -> Error) -> Self {
        Writer {
            w,
            kind,
            pareto_only,
            started: std::time::Instant::now(),
            prefix: Vec::new(),
            written: 0,
            io,
            intervals: None,
            tbo: false,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.w.write_all(bytes).map_err(self.io)
    }

    fn rows_now(&self) -> bool {
        self.kind != Kind::Summary && !self.pareto_only
    }
}

impl<W: Write> Output for Writer<W> {
    fn begin(&mut self, meta: &Meta) -> Result<()> {
        self.started = std::time::Instant::now();
        self.prefix = format!("{},{},{},", meta.model, meta.system, meta.calibration).into_bytes();
        self.tbo = meta.tbo;
        match self.kind {
            Kind::Csv => {
                let mut h = csv_header();
                if self.tbo {
                    h.pop();
                    h.push_str(",tbo\n");
                }
                if self.pareto_only && self.intervals.is_some() {
                    h.pop();
                    h.push_str(",tokens_per_s_p5,tokens_per_s_p95\n");
                }
                self.put(h.as_bytes())
            }
            Kind::Json => {
                let head = format!(
                    "{{\"model\":{},\"system\":{},\"calibration\":{},\"scenarios\":{},\"include_infeasible\":{},\"rows\":[",
                    json_string(&meta.model),
                    json_string(&meta.system),
                    json_string(&meta.calibration),
                    meta.scenarios,
                    meta.include_infeasible
                );
                self.put(head.as_bytes())
            }
            Kind::Summary => Ok(()),
        }
    }

    fn formatter(&self) -> RowFormat<'static> {
        let (kind, now, prefix) = (self.kind, self.rows_now(), self.prefix.clone());
        let tbo = self.tbo;
        Box::new(move |rows: &[Row], out: &mut Vec<u8>| {
            if !now {
                return;
            }
            if tbo {
                for r in rows {
                    if kind == Kind::Csv {
                        csv_row(out, &prefix, r);
                    } else {
                        out.extend_from_slice(b",\n");
                        json_row(out, r);
                    }
                    push_tbo(out, kind, r);
                }
                return;
            }
            if kind == Kind::Csv {
                csv_rows(out, &prefix, rows);
                return;
            }
            for r in rows {
                match kind {
                    Kind::Csv => csv_row(out, &prefix, r),
                    _ => {
                        // Every row is preceded by a separator; `write` drops the document's
                        // first.
                        out.extend_from_slice(b",\n");
                        json_row(out, r);
                    }
                }
            }
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let skip = if self.kind == Kind::Json && self.written == 0 {
            1 // the first row's leading comma; its newline stays
        } else {
            0
        };
        self.written += 1;
        self.put(&bytes[skip..])
    }

    fn finish(&mut self, meta: &Meta, s: &Summary) -> Result<()> {
        // The decisions' intervals: best by total, best per user, then the front.
        let decided: Vec<Row> = [s.best_total, s.best_per_user]
            .into_iter()
            .flatten()
            .chain(s.front.iter().copied())
            .collect();
        let iv = match &self.intervals {
            Some(f) => Some(f(&decided)?),
            None => None,
        };
        let interval_of = |r: &Row| -> Option<Interval> {
            let iv = iv.as_ref()?;
            decided.iter().position(|d| d == r).map(|i| iv[i])
        };
        match self.kind {
            Kind::Csv => {
                if self.pareto_only {
                    let mut out = Vec::new();
                    for r in &s.front {
                        csv_row(&mut out, &self.prefix, r);
                        if self.tbo {
                            push_tbo(&mut out, Kind::Csv, r);
                        }
                        if let Some(i) = interval_of(r) {
                            // The header named two more columns (`csv_header_with_intervals`).
                            out.pop();
                            out.push(b',');
                            push_fixed(&mut out, i.p5, 3);
                            out.push(b',');
                            push_fixed(&mut out, i.p95, 3);
                            out.push(b'\n');
                        }
                    }
                    self.put(&out)?;
                }
            }
            Kind::Json => {
                let mut out = Vec::new();
                let row = |out: &mut Vec<u8>, r: &Row| {
                    json_row(out, r);
                    if self.tbo {
                        push_tbo(out, Kind::Json, r);
                    }
                    if let Some(i) = interval_of(r) {
                        out.pop();
                        out.extend_from_slice(b",\"tokens_per_s_interval\":{\"p5\":");
                        push_json_f64(out, i.p5);
                        out.extend_from_slice(b",\"p50\":");
                        push_json_f64(out, i.p50);
                        out.extend_from_slice(b",\"p95\":");
                        push_json_f64(out, i.p95);
                        out.extend_from_slice(b"}}");
                    }
                };
                let rows = |out: &mut Vec<u8>, rows: &[Row]| {
                    for (i, r) in rows.iter().enumerate() {
                        out.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
                        row(out, r);
                    }
                };
                if self.pareto_only {
                    rows(&mut out, &s.front);
                }
                out.extend_from_slice(b"\n],\"fitting\":");
                push_u64(&mut out, s.fitting);
                out.extend_from_slice(b",\"unpriced\":");
                push_u64(&mut out, s.unpriced);
                out.extend_from_slice(b",\"best\":{\"tokens_per_s\":");
                for (i, b) in [s.best_total, s.best_per_user].iter().enumerate() {
                    if i == 1 {
                        out.extend_from_slice(b",\"tokens_per_s_per_user\":");
                    }
                    match b {
                        Some(r) => row(&mut out, r),
                        None => out.extend_from_slice(b"null"),
                    }
                }
                out.extend_from_slice(b"},\"pareto\":[");
                rows(&mut out, &s.front);
                out.extend_from_slice(b"\n]}\n");
                self.put(&out)?;
            }
            Kind::Summary => {
                let mut text = summary(meta, s, self.started.elapsed().as_secs_f64());
                if iv.is_some() {
                    text.push_str(&summary_intervals(s, &interval_of));
                }
                self.put(text.as_bytes())?;
            }
        }
        self.w.flush().map_err(self.io)
    }
}

/// The CSV header of `--pareto --intervals`: the rows' columns, then tokens/s p5 and p95.
pub fn csv_header_with_intervals() -> String {
    let mut h = csv_header();
    h.pop();
    h.push_str(",tokens_per_s_p5,tokens_per_s_p95\n");
    h
}

/// The decisions' intervals under the summary: tokens/s p5–p95 of the best rows and the front.
fn summary_intervals(s: &Summary, interval_of: &dyn Fn(&Row) -> Option<Interval>) -> String {
    use std::fmt::Write;
    let mut out =
        String::from("tokens/s p5 .. p95 (Monte Carlo over the calibration's uncertainty):\n");
    let mut line = |label: &str, r: &Row| {
        if let Some(i) = interval_of(r) {
            let _ = writeln!(
                out,
                "  {label:<22} {} .. {} tok/s (p50 {}): {}",
                grouped(i.p5, 1),
                grouped(i.p95, 1),
                grouped(i.p50, 1),
                describe(r)
            );
        }
    };
    if let Some(r) = &s.best_total {
        line("most tokens/s in total", r);
    }
    if let Some(r) = &s.best_per_user {
        line("most tokens/s per user", r);
    }
    for r in &s.front {
        line("pareto front", r);
    }
    out
}

fn describe(r: &Row) -> String {
    let mut pp = if r.pp > 1 {
        format!("pp {} ", r.pp)
    } else {
        String::new()
    };
    if r.dp > 1 {
        pp.push_str(&format!("dp {} ", r.dp));
    }
    if r.tbo {
        pp.push_str("tbo on ");
    }
    format!(
        "{pp}batch {} ctx {} {}/{} graphs {} k {}",
        r.batch,
        r.context,
        r.proto.name(),
        r.algo.name(),
        onoff(r.cuda_graphs),
        r.draft_tokens
    )
}

/// A short summary instead of one line per scenario.
pub fn summary(meta: &Meta, s: &Summary, wall_s: f64) -> String {
    use std::fmt::Write;
    let n = s.scenarios;
    let mut out = format!(
        "sweep: {} scenarios of {} on {} (calibration {}) in {:.3} s ({} scenarios/s)\n",
        grouped(n as f64, 0),
        meta.model,
        meta.system,
        meta.calibration,
        wall_s,
        grouped(n as f64 / wall_s.max(1e-9), 0)
    );
    let _ = writeln!(
        out,
        "memory: {} of {} scenarios fit (--gpu-memory-utilization; vLLM's KV accounting){}",
        grouped(s.fitting as f64, 0),
        grouped(n as f64, 0),
        if meta.include_infeasible {
            "; --include-infeasible: scenarios that do not fit are ranked too"
        } else {
            "; only those are ranked"
        }
    );
    if s.unpriced > 0 {
        let _ = writeln!(
            out,
            "warning: {} scenarios could not be priced (step time NaN in the rows)",
            grouped(s.unpriced as f64, 0)
        );
    }
    let fit_note = |r: &Row| {
        if r.fits {
            ""
        } else {
            " (does NOT fit in memory)"
        }
    };
    match s.best_total {
        Some(r) => {
            let _ = writeln!(
                out,
                "most tokens/s in total:  {} tok/s ({} per user), step {} µs: {}{}",
                grouped(r.tokens_per_s, 1),
                grouped(r.tokens_per_s_per_user, 1),
                us(r.step_time_us),
                describe(&r),
                fit_note(&r)
            );
        }
        None => out.push_str(
            "no scenario fits in memory: nothing to rank (a larger --gpu-memory-utilization, smaller batches or contexts, FP8 KV; --include-infeasible ranks them anyway)\n",
        ),
    }
    if let Some(r) = s.best_per_user {
        let _ = writeln!(
            out,
            "most tokens/s per user:  {} tok/s per user ({} in total), step {} µs: {}{}",
            grouped(r.tokens_per_s_per_user, 1),
            grouped(r.tokens_per_s, 1),
            us(r.step_time_us),
            describe(&r),
            fit_note(&r)
        );
    }
    let front = &s.front;
    let every = front.len().div_ceil(12).max(1);
    let _ = writeln!(
        out,
        "pareto front (total vs per-user tokens/s): {} scenarios; one in {} shown",
        front.len(),
        every
    );
    let _ = writeln!(
        out,
        "  {:>12}  {:>12}  scenario",
        "tok/s/user", "tok/s total"
    );
    for r in front.iter().step_by(every) {
        let _ = writeln!(
            out,
            "  {:>12}  {:>12}  {}{}",
            grouped(r.tokens_per_s_per_user, 1),
            grouped(r.tokens_per_s, 1),
            describe(r),
            fit_note(r)
        );
    }
    out.push_str("(--format csv|json for every row, --pareto for the front only)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Algo, Proto};

    /// Rows written together (number columns keeping their last text) are the bytes of each
    /// row written alone: over repeated and changing values, both zeros, NaN, a value on a
    /// rounding half and one past the fast writer's range.
    #[test]
    fn rows_written_together_are_each_row_alone() {
        let values = [
            12579.251,
            12579.251,
            0.0,
            -0.0,
            f64::NAN,
            0.0005,
            1e300,
            2627.5735,
            2627.5735,
            7.0,
        ];
        let mut rows = Vec::new();
        for (i, &v) in values.iter().enumerate() {
            for j in 0..3 {
                let mut busy = [1841.38; Category::ALL.len()];
                busy[2] = v + j as f64;
                busy[5] = if j == 1 { v } else { 3.5 };
                rows.push(Row {
                    pp: 1 + j as u32,
                    dp: 1,
                    tbo: false,
                    batch: 1 + i as u32,
                    context: 1000 + j,
                    proto: Proto::Ll,
                    algo: Algo::Ring,
                    cuda_graphs: j != 2,
                    draft_tokens: 0,
                    step_time_us: v,
                    tokens_per_s: if j == 0 { v } else { 79.496 },
                    tokens_per_s_per_user: 79.4960,
                    mean_acceptance_length: 1.0,
                    busy_us: busy,
                    fits: true,
                });
            }
        }
        let prefix = b"kimi-k2.5,sys,cal,";
        let mut together = Vec::new();
        csv_rows(&mut together, prefix, &rows);
        let mut alone = Vec::new();
        for r in &rows {
            csv_row(&mut alone, prefix, r);
        }
        assert_eq!(
            String::from_utf8(together).unwrap(),
            String::from_utf8(alone).unwrap()
        );
    }

    #[test]
    fn fixed_point_matches_format() {
        for v in [
            0.0,
            1.0,
            0.5,
            1234.5678,
            0.0004,
            0.0005,
            0.00051,
            99.9996,
            1e9 + 0.123,
            -3.25,
            -0.0001,
            7.0e-7,
            123456789.987654,
            99_999_999.999_999_9,
            100_000_000.0,
            12_345_678.0,
            0.999_999_6,
            -99_999_999.5,
        ] {
            for d in [0u32, 1, 3, 4, 5, 6, 7] {
                let mut out = Vec::new();
                push_fixed(&mut out, v, d);
                let got = String::from_utf8(out).unwrap();
                let want = format!("{v:.*}", d as usize);
                // 0.0005 and 0.5 are (near) ties: decided as format! does.
                assert_eq!(got, want, "{v} at {d} decimals");
            }
        }
        // Random values, and values on or next to a half at 3 and 4 decimals (busy times built
        // from 4-decimal table values), against `format!`.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            let v = match i % 4 {
                0 => u * 10f64.powi((i % 12) as i32),
                1 => ((x % 10_000_000) as f64 + 0.5) / 1000.0,
                2 => ((x % 100_000_000) as f64 * 0.0001) * (1 + i % 61) as f64,
                _ => -u * 1e4,
            };
            for d in [0u32, 2, 3, 4, 6] {
                let mut out = Vec::new();
                push_fixed(&mut out, v, d);
                let want = format!("{v:.*}", d as usize);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    want,
                    "{v:e} at {d} decimals"
                );
            }
        }
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300] {
            let mut out = Vec::new();
            push_fixed(&mut out, v, 3);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{v:.3}"));
        }
    }
}
