//! Pages built by hand the way ring_buffer.c writes them.

use super::*;

const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;
";

const HEADER_EVENT: &str = "# compressed entry header
\ttype_len    :    5 bits
\ttime_delta  :   27 bits
\tarray       :   32 bits

\tpadding     : type == 29
\ttime_extend : type == 30
\ttime_stamp : type == 31
\tdata max type_len  == 28
";

fn fmt() -> PageFormat {
    PageFormat::parse(HEADER_PAGE, HEADER_EVENT).unwrap()
}

struct Page {
    data: Vec<u8>,
}

impl Page {
    fn new() -> Page {
        Page { data: Vec::new() }
    }
    fn word(&mut self, type_len: u32, delta: u32) {
        self.data
            .extend_from_slice(&(type_len | (delta << 5)).to_ne_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.data.extend_from_slice(&v.to_ne_bytes());
    }
    /// A small event: payload padded to 4 bytes.
    fn event(&mut self, delta: u32, payload: &[u8]) {
        let n = payload.len().div_ceil(4);
        self.word(n as u32, delta);
        self.data.extend_from_slice(payload);
        self.data.resize(self.data.len() + n * 4 - payload.len(), 0);
    }
    fn build(&self, ts: u64, flags: u64, missed: Option<u64>) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        p[..8].copy_from_slice(&ts.to_ne_bytes());
        let commit = self.data.len() as u64 | flags;
        p[8..16].copy_from_slice(&commit.to_ne_bytes());
        p[16..16 + self.data.len()].copy_from_slice(&self.data);
        if let Some(m) = missed {
            let at = 16 + self.data.len();
            p[at..at + 8].copy_from_slice(&m.to_ne_bytes());
        }
        p
    }
}

type Decoded = (Vec<(u64, Vec<u8>)>, Result<Missed, String>);

fn decode(page: &[u8]) -> Decoded {
    let mut out = Vec::new();
    let r = fmt().decode(page, |ts, d| out.push((ts, d.to_vec())));
    (out, r)
}

#[test]
fn parses_this_kernels_headers() {
    let f = fmt();
    assert_eq!(f.page_size, 4096);
    assert_eq!(
        (f.padding, f.time_extend, f.time_stamp, f.data_max),
        (29, 30, 31, 28)
    );
    assert!(PageFormat::parse("", HEADER_EVENT).is_err());
    assert!(PageFormat::parse(HEADER_PAGE, "type_len : 5 bits").is_err());
}

#[test]
fn deltas_extends_stamps_and_long_events() {
    let mut p = Page::new();
    p.event(0, b"abcd");
    p.event(10, b"efghij");
    // TIME_EXTEND: 3 << 27 plus 5 ns, then an event with delta 0.
    p.word(30, 5);
    p.u32(3);
    p.event(0, b"k");
    // A type_len 0 event: length word counts itself.
    let long = vec![7u8; 120];
    p.word(0, 2);
    p.u32(120 + 4);
    p.data.extend_from_slice(&long);
    // TIME_STAMP absolute: 1 << 27 + 9.
    p.word(31, 9);
    p.u32(1);
    p.event(1, b"z");
    // A discarded event (padding with a delta) is skipped.
    p.word(29, 1);
    p.u32(8);
    p.data.extend_from_slice(&[0; 4]);
    p.event(4, b"y");
    let (ev, r) = decode(&p.build(1_000, 0, None));
    assert_eq!(r, Ok(Missed::None));
    let ts: Vec<u64> = ev.iter().map(|e| e.0).collect();
    let ext = 1_010 + (3 << 27) + 5;
    let abs = (1 << 27) + 9;
    assert_eq!(ts, vec![1_000, 1_010, ext, ext + 2, abs + 1, abs + 5]);
    assert_eq!(ev[0].1, b"abcd");
    assert_eq!(ev[1].1, b"efghij\0\0");
    assert_eq!(ev[3].1, long);
}

#[test]
fn null_padding_ends_the_page() {
    let mut p = Page::new();
    p.event(0, b"abcd");
    p.word(29, 0);
    p.data.extend_from_slice(&[0; 12]);
    let (ev, r) = decode(&p.build(5, 0, None));
    assert_eq!((ev.len(), r), (1, Ok(Missed::None)));
}

#[test]
fn missed_events_flags_and_stored_count() {
    let mut p = Page::new();
    p.event(0, b"abcd");
    let (_, r) = decode(&p.build(5, MISSED_EVENTS | MISSED_STORED, Some(42)));
    assert_eq!(r, Ok(Missed::Count(42)));
    let (_, r) = decode(&p.build(5, MISSED_EVENTS, None));
    assert_eq!(r, Ok(Missed::Some));
}

#[test]
fn absolute_stamps_take_the_top_bits_from_the_current_time() {
    let cur = (1u64 << 60) | 500;
    assert_eq!(fix_abs_ts(600, cur), (1 << 60) | 600);
    // Wrapped below the current time: the top bits moved on.
    assert_eq!(fix_abs_ts(400, cur), ((1 << 60) | 400) + (1 << 59));
    assert_eq!(fix_abs_ts(400, 500), 400);
}

#[test]
fn corrupt_pages_are_errors_not_panics() {
    let mut p = Page::new();
    p.word(0, 0);
    p.u32(4000);
    let (_, r) = decode(&p.build(0, 0, None));
    assert!(r.unwrap_err().contains("past the data"));
    let mut p = Page::new();
    p.event(0, b"abcd");
    let mut page = p.build(0, 0, None);
    page[8..16].copy_from_slice(&5000u64.to_ne_bytes());
    assert!(decode(&page).1.unwrap_err().contains("past the page"));
    assert!(decode(&[0u8; 10]).1.is_err());
}

proptest::proptest! {
    #[test]
    fn never_panics(page in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
        let _ = decode(&page);
    }
}

#[test]
fn parses_the_fixture_headers_of_kernel_6_18() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/formats");
    let page = std::fs::read_to_string(dir.join("header_page")).unwrap();
    let event = std::fs::read_to_string(dir.join("header_event")).unwrap();
    assert_eq!(PageFormat::parse(&page, &event).unwrap(), fmt());
}
