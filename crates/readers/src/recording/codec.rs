//! Byte-level pieces of the format: LEB128 varints (zigzag for signed
//! deltas), length-prefixed strings, a bounds-checked cursor that never
//! allocates from a length it has not checked against the bytes left, and
//! the optional deflate of a payload.

use super::format::MAX_INFLATED;
use integer_encoding::VarInt;
use std::io::Read;

/// Payload flag byte of the series frames: bit 0 = the rest is deflated.
pub const FLAG_DEFLATE: u8 = 1;

/// LEB128, written byte by byte into `out`: the same bytes as
/// `integer_encoding`'s `encode_var`, without the staging array (the
/// encoders call this ~30 times a sample).
#[inline]
pub fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag, then LEB128 (as `integer_encoding` does for i64).
#[inline]
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    put_u64(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// `cur - prev` as a zigzag varint: lossless for any two u64 (a counter
/// that went backwards or jumped is stored as it was).
pub fn put_delta(out: &mut Vec<u8>, prev: u64, cur: u64) {
    put_i64(out, cur.wrapping_sub(prev) as i64);
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// A decoding error: what was wrong and where in the (inflated) payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type DResult<T> = Result<T, DecodeError>;

pub fn err<T>(msg: impl Into<String>) -> DResult<T> {
    Err(DecodeError(msg.into()))
}

/// Reads a payload front to back.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Dec { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn u8(&mut self) -> DResult<u8> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| DecodeError(format!("ends at byte {}", self.pos)))?;
        self.pos += 1;
        Ok(b)
    }

    pub fn u64(&mut self) -> DResult<u64> {
        match u64::decode_var(&self.buf[self.pos..]) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => err(format!("bad or cut varint at byte {}", self.pos)),
        }
    }

    pub fn i64(&mut self) -> DResult<i64> {
        match i64::decode_var(&self.buf[self.pos..]) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => err(format!("bad or cut varint at byte {}", self.pos)),
        }
    }

    pub fn u32(&mut self) -> DResult<u32> {
        let at = self.pos;
        let v = self.u64()?;
        u32::try_from(v).or_else(|_| err(format!("value {v} at byte {at} exceeds 32 bits")))
    }

    /// `prev` plus a zigzag delta (the inverse of [`put_delta`]).
    pub fn delta(&mut self, prev: u64) -> DResult<u64> {
        Ok(prev.wrapping_add(self.i64()? as u64))
    }

    /// A count of items that each take at least `min_bytes`: larger than the
    /// bytes left can hold is corruption (and is never allocated).
    pub fn count(&mut self, min_bytes: usize, what: &str) -> DResult<usize> {
        let at = self.pos;
        let n = self.u64()?;
        let fits = (self.remaining() / min_bytes.max(1)) as u64;
        if n > fits {
            return err(format!(
                "{what} count {n} at byte {at} exceeds what the {} bytes left can hold",
                self.remaining()
            ));
        }
        Ok(n as usize)
    }

    pub fn bytes(&mut self) -> DResult<&'a [u8]> {
        let at = self.pos;
        let n = self.u64()?;
        if n > self.remaining() as u64 {
            return err(format!(
                "length {n} at byte {at} exceeds the {} bytes left",
                self.remaining()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    pub fn str(&mut self) -> DResult<&'a str> {
        let at = self.pos;
        let b = self.bytes()?;
        std::str::from_utf8(b).or_else(|_| err(format!("string at byte {at} is not UTF-8")))
    }

    /// The rest of the payload.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    /// Fails when bytes are left over (a well-formed payload is used up).
    pub fn finish(&self) -> DResult<()> {
        if self.is_empty() {
            Ok(())
        } else {
            err(format!(
                "{} bytes left over after byte {}",
                self.remaining(),
                self.pos
            ))
        }
    }
}

/// How hard to compress. Any level inflates the same way, so this is the
/// writer's choice alone, and not part of the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// The series frames: a few KiB a second, written at every flush.
    Default,
    /// Checkpoints (tens of KiB of /proc text, at the start and the end of
    /// every recording): zlib level 2, a fraction of level 6's time; on
    /// this machine's checkpoints it also came out ~10 % smaller than
    /// miniz's fastest level, which this replaced.
    Fast,
}

/// Raw deflate (no zlib header) of `data`.
pub fn deflate(data: &[u8]) -> Vec<u8> {
    deflate_with(data, Effort::Default)
}

/// Raw deflate of `data` with a window and hash table sized to it.
///
/// Why zlib-rs and not flate2's miniz backend: miniz's tables are fixed at
/// 32 KiB of window and two 64 KiB hash arrays, and resetting a kept
/// compressor (or making a new one) writes all ~300 KiB of them. A series
/// frame is a few KiB, so that memset was most of a flush: ~100 µs a second
/// in `record`, on caches that are cold after each 10 ms sleep. zlib's
/// format lets the window and hash shrink to the input (window bits,
/// memLevel), which only zlib-rs exposes among the pure-Rust deflaters. The
/// stream is the same raw deflate, so every reader inflates it as before.
pub fn deflate_with(data: &[u8], effort: Effort) -> Vec<u8> {
    // The smallest window holding the whole input (512 B to 32 KiB), and
    // a hash table of as many entries (memLevel + 7 hash bits).
    let bits = (usize::BITS - data.len().max(1).leading_zeros()).clamp(9, 15) as i32;
    let config = zlib_rs::DeflateConfig {
        level: match effort {
            Effort::Default => 6,
            Effort::Fast => 2,
        },
        method: zlib_rs::Method::Deflated,
        window_bits: -bits,
        mem_level: (bits - 7).clamp(1, 8),
        strategy: zlib_rs::Strategy::Default,
    };
    let mut out = vec![0u8; zlib_rs::compress_bound(data.len())];
    let (z, rc) = zlib_rs::compress_slice(&mut out, data, config);
    // Compressing into a buffer of the bound cannot fail; an empty payload
    // makes pack() store the body as it is.
    if rc != zlib_rs::ReturnCode::Ok {
        return Vec::new();
    }
    let n = z.len();
    out.truncate(n);
    out
}

pub fn inflate(data: &[u8]) -> DResult<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(data)
        .take(MAX_INFLATED as u64 + 1)
        .read_to_end(&mut out)
        .or_else(|e| err(format!("deflate stream is corrupt: {e}")))?;
    if out.len() > MAX_INFLATED {
        return err(format!("inflates to more than {MAX_INFLATED} bytes"));
    }
    Ok(out)
}

/// Bodies shorter than this are stored: deflate saves a few bytes on them
/// (an interrupt or counter batch of 45-90 bytes: 0-30 bytes) and each
/// compression first zeroes ~300 KB of the compressor's tables.
pub const STORE_BELOW: usize = 128;

/// A series payload: flag byte, then `body` deflated when that is smaller.
pub fn pack(body: &[u8]) -> Vec<u8> {
    pack_with(body, Effort::Default)
}

pub fn pack_with(body: &[u8], effort: Effort) -> Vec<u8> {
    let z = if body.len() < STORE_BELOW {
        Vec::new()
    } else {
        deflate_with(body, effort)
    };
    let mut out = Vec::with_capacity(1 + body.len().min(z.len()));
    if !z.is_empty() && z.len() < body.len() {
        out.push(FLAG_DEFLATE);
        out.extend_from_slice(&z);
    } else {
        out.push(0);
        out.extend_from_slice(body);
    }
    out
}

/// The body of a series payload (inverse of [`pack`]).
pub fn unpack(payload: &[u8]) -> DResult<std::borrow::Cow<'_, [u8]>> {
    let (&flags, rest) = payload
        .split_first()
        .ok_or_else(|| DecodeError("empty payload".into()))?;
    match flags {
        0 => Ok(std::borrow::Cow::Borrowed(rest)),
        FLAG_DEFLATE => Ok(std::borrow::Cow::Owned(inflate(rest)?)),
        f => err(format!("unknown flags {f:#04x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size round-trips, at both efforts; the sized window costs
    /// little ratio against flate2 (miniz) at its default on /proc text,
    /// from below the smallest window to past the largest.
    #[test]
    fn deflate_round_trips_and_compresses_like_flate2() {
        use std::io::Write;
        let stat = std::fs::read("/proc/stat").unwrap();
        let texts: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"x".to_vec(),
            stat[..stat.len().min(300)].to_vec(),
            stat.repeat(3),
            stat.repeat(60),
            (0..200_000u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
                .collect(),
        ];
        for (i, t) in texts.iter().enumerate() {
            for effort in [Effort::Default, Effort::Fast] {
                let z = deflate_with(t, effort);
                assert_eq!(&inflate(&z).unwrap(), t, "{} bytes, {effort:?}", t.len());
            }
            // The last is a synthetic period-256 sequence: round trip only.
            if i == texts.len() - 1 {
                continue;
            }
            let mut e =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(t).unwrap();
            let reference = e.finish().unwrap().len();
            let z = deflate(t).len();
            // Within 5 %, or both under 2 % of the input (exact repeats).
            assert!(
                z <= reference + reference / 20 + 8 || z < t.len() / 50,
                "{} bytes: {z} deflated, flate2 {reference}",
                t.len()
            );
        }
    }

    #[test]
    fn deltas_are_lossless_for_any_pair() {
        for (a, b) in [(0, u64::MAX), (u64::MAX, 0), (5, 3), (1 << 63, 7)] {
            let mut out = Vec::new();
            put_delta(&mut out, a, b);
            assert_eq!(Dec::new(&out).delta(a).unwrap(), b);
        }
    }

    #[test]
    fn counts_and_lengths_are_checked_before_use() {
        let mut out = Vec::new();
        put_u64(&mut out, u64::MAX);
        assert!(Dec::new(&out).count(1, "rows").is_err());
        assert!(Dec::new(&out).bytes().is_err());
        assert!(Dec::new(&[0x80]).u64().is_err(), "cut varint");
        assert!(Dec::new(&[0xff; 11]).u64().is_err(), "overlong varint");
    }

    #[test]
    fn pack_deflates_only_when_it_pays() {
        let zeros = vec![0u8; 1000];
        let p = pack(&zeros);
        assert_eq!(p[0], FLAG_DEFLATE);
        assert!(p.len() < 100);
        assert_eq!(unpack(&p).unwrap().as_ref(), zeros.as_slice());
        let tiny = [7u8];
        assert_eq!(pack(&tiny), vec![0, 7]);
        assert!(unpack(&[2, 0]).is_err());
        assert!(unpack(&[FLAG_DEFLATE, 0xff, 0xff]).is_err());
    }
}
