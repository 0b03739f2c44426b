//! Integer and fixed-point writers into byte buffers, bit for bit what `format!` writes, without
//! its cost per field.

use std::io::Write;

/// Writes an unsigned integer.
#[inline]
pub(super) fn push_u64(out: &mut Vec<u8>, v: u64) {
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
pub(super) fn push_fixed(out: &mut Vec<u8>, v: f64, decimals: u32) {
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
pub(super) fn push_fixed_d<const D: u32>(out: &mut Vec<u8>, v: f64) {
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
pub(super) const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight decimal digits of `x` (below 10^8, leading zeros kept) as the bytes 0 to 9 of a
/// word, the most significant digit in its lowest byte (the first in memory, little-endian):
/// the number split in halves, quarters and digits with multiplications, all lanes at once.
/// Each lane's quotient by a multiply and shift is exact over its range (n < 10^4 by 100 with
/// 10486 / 2^20, n < 100 by 10 with 103 / 2^10), and no lane's product reaches the next lane.
#[inline(always)]
pub(super) fn digits8(x: u32) -> u64 {
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
pub(super) fn push_fixed_long<const D: u32>(
    out: &mut Vec<u8>,
    negative: bool,
    mut q: u64,
    mut r: u64,
) {
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
pub(super) fn push_text(out: &mut Vec<u8>, buf: &[u8; 32], len: usize) {
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
pub(super) fn push_json_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        out.extend_from_slice(ryu::Buffer::new().format_finite(v).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

pub(super) fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
