//! The HTTP limits against raw TCP clients.

use super::helpers::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A client that sends its headers a byte at a time is cut off when the
/// header timeout (5 s) ends, and meanwhile others are served; so is a
/// keep-alive connection that sits idle; a huge header is refused.
#[test]
fn slow_loris_idle_and_oversized_clients_are_cut_off() {
    let s = Serve::start(&[]);
    let addr = s.addr;
    let loris = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let t = Instant::now();
        let mut sent = 0;
        for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if c.write_all(&[*b]).is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_millis(200));
            if t.elapsed() > Duration::from_secs(14) {
                break;
            }
        }
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        (t.elapsed(), sent, rest)
    });
    let idle = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = vec![0; 1 << 20];
        let n = c.read(&mut buf).unwrap();
        let t = Instant::now();
        // Keep-alive: the server keeps the connection after the response...
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        (n, t.elapsed())
    });
    // ...while both are held, a normal scrape is served.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(get(addr, "/metrics", None).status, 200);

    let (held, sent, rest) = loris.join().unwrap();
    assert!(rest.is_empty() || String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 408"));
    assert!(
        held >= Duration::from_secs(4) && held < Duration::from_secs(9),
        "slow client held the connection {held:?} ({sent} bytes sent)"
    );
    let (n, idle_for) = idle.join().unwrap();
    assert!(n > 0);
    assert!(
        idle_for >= Duration::from_secs(4) && idle_for < Duration::from_secs(9),
        "idle keep-alive connection closed after {idle_for:?}"
    );
    let big = request(
        addr,
        &format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        ),
    );
    assert_eq!(big.status, 431);
    assert_eq!(get(addr, "/metrics", None).status, 200);
}
