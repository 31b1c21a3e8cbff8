//! The tests' one HTTP client: a single HTTP/1.1 exchange on a fresh
//! connection (`Connection: close`), bounded in time, returning the status
//! and the body. Chunked bodies (Prometheus sends them) are decoded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// `method path` to `addr`: status and body, or the I/O error.
pub fn try_request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .replace(' ', "")
            .starts_with("transfer-encoding:chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// Like [`try_request`]; an I/O error fails the test.
pub fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    try_request(addr, method, path).unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`request`] from async code, on a blocking thread so that the runtime
/// (which may be serving the other end) keeps running.
pub async fn request_async(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let (method, path) = (method.to_string(), path.to_string());
    tokio::task::spawn_blocking(move || request(addr, &method, &path))
        .await
        .expect("HTTP request thread")
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size =
            usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap_or(&after[size..]);
    }
    out
}

#[test]
fn chunked_bodies_are_decoded() {
    assert_eq!(
        dechunk("4\r\nWiki\r\n5;x=y\r\npedia\r\n0\r\n\r\n"),
        "Wikipedia"
    );
}
