//! The batch-at-a-time stat encoder against the sample-at-a-time one it
//! replaced (kept here as the reference): the same bytes for hotplug,
//! rows with 4 to 10 columns, counters going back and batches cut anywhere;
//! and the varints against `integer_encoding`'s.

use super::codec::{pack, put_delta, put_i64, put_u64, unpack};
use super::series::{StatDecoder, StatEncoder};
use crate::stat::{self, ProcStat};
use integer_encoding::VarInt;

/// The encoder as it was: every sample's deltas encoded as it comes.
struct Reference {
    body: Vec<u8>,
    n: u64,
    last_t: u64,
    layout: Vec<(u32, u8)>,
    prev: Vec<(u32, [u64; 10])>,
}

fn rows(s: &ProcStat) -> Vec<(u32, stat::CpuTimes)> {
    let total = s.total.map(|t| (0, t));
    let cpus = s.cpus.iter().filter_map(|r| Some((r.cpu? + 1, r.times)));
    total.into_iter().chain(cpus).collect()
}

impl Reference {
    fn push(&mut self, t_ns: u64, s: &ProcStat) -> Option<Vec<u8>> {
        let layout: Vec<(u32, u8)> = rows(s)
            .iter()
            .map(|(k, t)| (*k, t.column_count() as u8))
            .collect();
        let closed = if layout == self.layout {
            None
        } else {
            self.take()
        };
        self.layout = layout;
        let t = t_ns.max(self.last_t);
        put_u64(&mut self.body, t - self.last_t);
        self.last_t = t;
        self.n += 1;
        let mut cur_all = Vec::new();
        for (key, t) in rows(s) {
            let base = self
                .prev
                .iter()
                .find(|(k, _)| *k == key)
                .map_or([0; 10], |p| p.1);
            let mut cur = [0u64; 10];
            for (i, slot) in cur.iter_mut().enumerate().take(t.column_count()) {
                *slot = t.column(i).unwrap_or(0);
                put_delta(&mut self.body, base[i], *slot);
            }
            cur_all.push((key, cur));
        }
        self.prev = cur_all;
        closed
    }

    fn take(&mut self) -> Option<Vec<u8>> {
        if self.n == 0 {
            return None;
        }
        let mut body = Vec::new();
        put_u64(&mut body, self.layout.len() as u64);
        for &(k, n) in &self.layout {
            put_u64(&mut body, k as u64);
            body.push(n);
        }
        put_u64(&mut body, self.n);
        body.extend_from_slice(&self.body);
        self.body.clear();
        self.n = 0;
        Some(pack(&body))
    }
}

/// Sample `i`: CPUs come and go, column counts change, values go back.
fn sample(i: u64) -> ProcStat {
    let cols = 4 + (i / 7 % 7) as usize;
    let row = |name: &str, k: u64| {
        let v: Vec<String> = (0..cols)
            .map(|c| {
                let x = i * (c as u64 + 1) * 37 + k;
                // A counter that goes back now and then, and a huge one.
                if c == 4 && i.is_multiple_of(5) {
                    3
                } else if c == 9 {
                    u64::MAX - x
                } else {
                    x
                }
            })
            .map(|x| x.to_string())
            .collect();
        format!("{name} {}\n", v.join(" "))
    };
    let mut text = row("cpu ", 0);
    for c in 0..4u32 {
        if !(c == 2 && (i / 11) % 2 == 1) {
            text.push_str(&row(&format!("cpu{c}"), c as u64 + 1));
        }
    }
    stat::parse(&text, "t").unwrap()
}

#[test]
fn batches_are_the_bytes_of_the_sample_at_a_time_encoder() {
    let start = 1_000;
    let (mut new, mut old) = (
        StatEncoder::new(start),
        Reference {
            body: Vec::new(),
            n: 0,
            last_t: start,
            layout: Vec::new(),
            prev: Vec::new(),
        },
    );
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut dec = StatDecoder::new(start);
    let mut decoded = 0;
    for i in 0..300u64 {
        // Times mostly 10 ms apart, once going back (clamped by both).
        let t = start + if i == 50 { 5 } else { i * 10_000_000 };
        let s = sample(i);
        a.extend(new.push(t, &s));
        b.extend(old.push(t, &s));
        // Flushes at uneven points, as the once-a-second timer cuts them.
        if i % 13 == 12 || i % 29 == 0 {
            a.extend(new.take());
            b.extend(old.take());
            assert_eq!(new.pending_values(), 0);
        }
    }
    a.extend(new.take());
    b.extend(old.take());
    assert!(a.len() > 30, "{} payloads", a.len());
    assert_eq!(a, b);
    for p in &a {
        unpack(p).unwrap();
        decoded += dec.decode(p).unwrap().len();
    }
    assert_eq!(decoded, 300);
    // The last sample decodes to what was pushed.
    let last = dec.decode(&{
        let mut e = StatEncoder::new(start);
        e.push(start + 1, &sample(0));
        e.take().unwrap()
    });
    assert!(last.is_ok());
}

#[test]
fn varints_are_integer_encoding_s() {
    let mut vals: Vec<u64> = vec![0, 1, 127, 128, 255, 16_383, 16_384, u64::MAX, 1 << 63];
    vals.extend((0..64).map(|b| 1u64 << b));
    vals.extend((0..64).map(|b| (1u64 << b) - 1));
    for v in vals {
        let mut out = Vec::new();
        put_u64(&mut out, v);
        let mut want = [0u8; 10];
        let n = v.encode_var(&mut want);
        assert_eq!(out, want[..n], "{v}");
        for s in [v as i64, (v as i64).wrapping_neg()] {
            let mut out = Vec::new();
            put_i64(&mut out, s);
            let mut want = [0u8; 10];
            let n = s.encode_var(&mut want);
            assert_eq!(out, want[..n], "{s}");
        }
    }
}
