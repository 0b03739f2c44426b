//! One sweep row as CSV or JSON text: the settings, then the number columns, copied from the
//! last row's text where their values repeat.

use super::digits::{onoff, push_fixed, push_json_f64, push_text, push_u64};
use super::Kind;
use crate::category::Category;
use crate::scenario::{Algo, Proto};
use crate::whatif::sweep::Row;

/// The columns after a row's settings: acceptance length, step, tokens/s, per user, fits, the
/// busy times, pp, dp. Consecutive rows of a sweep repeat most of them (a context's rows change
/// the attention busy time and the rates only; a batch's token-dependent busy times stay put for
/// every context), so each row copies the runs of columns whose values are the last row's from
/// the last row's text and formats the others.
pub(super) const NUM_COLS: usize = 4 + 1 + Category::ALL.len() + 2;

/// The last row's column values (as bits) and where its text lies in the output
/// (`Numbers::put`): two slots, the last row's and the one being written, in turn.
pub(super) struct Numbers {
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
pub(super) fn copy_within_ahead(out: &mut Vec<u8>, from: usize, len: usize) {
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
pub(super) struct Head {
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
pub(super) struct Settings {
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
pub(super) struct Kept {
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

pub(super) fn csv_row_with(out: &mut Vec<u8>, prefix: &[u8], r: &Row, kept: &mut Kept) {
    out.reserve(prefix.len() + 64 + 24 * NUM_COLS);
    kept.head.put(out, prefix, r.batch);
    push_u64(out, r.context);
    out.push(b',');
    kept.settings.put(out, r);
    kept.numbers.put(out, r);
}

/// The columns a row gains only where the grid lists their layout setting (`Meta::settings`),
/// after dp in the knob table's order, written per layout once before the rows; a grid without
/// them keeps the columns and the fast writer (`csv_rows`) of one without.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Listed {
    /// The CSV header's names of the columns, each with its comma.
    header: String,
    /// Per layout (`Row::layout`): its settings as CSV columns, each with its comma.
    csv: Vec<Vec<u8>>,
    /// Per layout: its settings as the JSON object's keys, each with its comma.
    json: Vec<Vec<u8>>,
    /// Per layout: the summary's words for its settings other than the default (`tbo on `).
    words: Vec<String>,
}

impl Listed {
    pub(super) fn of(meta: &crate::whatif::sweep::Meta) -> Self {
        let default = crate::sim::ScenarioRequest::default();
        let mut l = Listed::default();
        for k in &meta.settings {
            l.header.push(',');
            l.header.push_str(&k.column());
        }
        for values in &meta.layout_values {
            let (mut csv, mut json, mut words) = (Vec::new(), Vec::new(), String::new());
            for (k, v) in meta.settings.iter().zip(values) {
                csv.push(b',');
                json.extend_from_slice(format!(",{}:", json_string(&k.column())).as_bytes());
                match v {
                    Some(v) => {
                        csv.extend_from_slice(v.to_string().as_bytes());
                        json.extend_from_slice(v.json().to_string().as_bytes());
                    }
                    None => json.extend_from_slice(b"null"),
                }
                if let Some(v) = v.as_ref().filter(|&v| Some(v) != k.get(&default).as_ref()) {
                    words.push_str(&format!("{} {v} ", k.name()));
                }
            }
            l.csv.push(csv);
            l.json.push(json);
            l.words.push(words);
        }
        l
    }

    pub(super) fn any(&self) -> bool {
        !self.header.is_empty()
    }

    /// The CSV header's names of the columns, each with its comma.
    pub(super) fn header(&self) -> &str {
        &self.header
    }

    /// The summary's words for row `r`'s listed settings other than the default.
    pub(super) fn words(&self, r: &Row) -> &str {
        self.words.get(r.layout as usize).map_or("", String::as_str)
    }

    /// Appends the row's listed settings to the row just written: CSV columns after dp, or the
    /// JSON object's keys.
    pub(super) fn push(&self, out: &mut Vec<u8>, kind: Kind, r: &Row) {
        if !self.any() {
            return;
        }
        let end = out.pop();
        let text = if kind == Kind::Csv {
            &self.csv
        } else {
            &self.json
        };
        out.extend_from_slice(&text[r.layout as usize]);
        out.extend(end);
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

pub(super) fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}
