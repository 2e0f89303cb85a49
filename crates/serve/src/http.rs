//! The HTTP side, hyper on a single-threaded tokio runtime: GET/HEAD of
//! `/metrics` and `/` only, nothing that changes anything. Requests are
//! bounded (header bytes, no body), a client gets `header_timeout` to send
//! its headers and as long again while idle between requests (so a
//! slow-loris client cannot hold a connection), every connection ends after
//! `max_connection_age`, and at most `max_connections` are open at once.

use crate::shared::Scrapes;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use stealscope_output::metrics::Format;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub max_connection_age: Duration,
    pub max_connections: usize,
    /// Read buffer, hence the largest request head (hyper's minimum is 8 KiB).
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(5),
            max_connection_age: Duration::from_secs(120),
            max_connections: 512,
            max_header_bytes: 16 * 1024,
        }
    }
}

const INDEX: &str = "stealscope exporter: metrics at /metrics\n";

fn response(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    response(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(text.as_bytes()),
    )
}

fn handle(req: &Request<Incoming>, scrapes: &Scrapes) -> Response<Full<Bytes>> {
    let has_body = req.headers().contains_key(TRANSFER_ENCODING)
        || req
            .headers()
            .get(CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "requests take no body\n");
    }
    let path = req.uri().path();
    if path != "/metrics" && path != "/" {
        return plain(StatusCode::NOT_FOUND, "not found; metrics at /metrics\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "read-only: GET or HEAD\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if path == "/" {
        return plain(StatusCode::OK, INDEX);
    }
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    response(StatusCode::OK, format.content_type(), scrapes.body(format))
}

pub(crate) async fn serve(
    listener: std::net::TcpListener,
    scrapes: Arc<Scrapes>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            // Out of file descriptors and the like: back off, keep serving.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Over the limit the connection is closed at once.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let scrapes = scrapes.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let r = handle(&req, &scrapes);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_header_bytes)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = tokio::time::sleep(limits.max_connection_age) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits.header_timeout, conn).await;
                }
            }
            drop(slot);
        });
    }
}
