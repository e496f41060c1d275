//! A small raw HTTP/1.1 client for talking to a daemon's diagnostics
//! listener: one exchange per fresh connection (`Connection: close`),
//! bounded in time, the response parsed with a fixed length or de-chunked.
//! Raw on purpose, so tests see exactly the bytes the daemon sends.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one HTTP exchange with the daemon may take.
const HTTP_DEADLINE: Duration = Duration::from_secs(30);

/// One HTTP response as received.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The body as (lossy) text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The first header with this (lower-case) name among headers parsed as
/// [`HttpResponse::headers`] holds them.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<HttpResponse> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let mut head =
            format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !(body.is_empty() && (method == "GET" || method == "HEAD")) {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse_response(&raw, method == "HEAD")
    };
    tokio::time::timeout(HTTP_DEADLINE, exchange)
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no complete response within {HTTP_DEADLINE:?}"),
            )
        })?
}

fn malformed(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}

fn parse_response(raw: &[u8], head_only: bool) -> std::io::Result<HttpResponse> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| malformed(format!("no end of head in {} bytes", raw.len())))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| malformed("head is not UTF-8"))?;
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| malformed(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if head_only {
        Vec::new()
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(length) = find("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| malformed(format!("bad content-length {length:?}")))?;
        rest.get(..length)
            .ok_or_else(|| malformed(format!("body shorter than {length} bytes")))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| malformed("chunk size line"))?;
        let size_text = std::str::from_utf8(&rest[..end]).map_err(|_| malformed("chunk size"))?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| malformed(format!("chunk size {size_text:?}")))?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or_else(|| malformed("short chunk"))?);
        rest = rest.get(size + 2..).ok_or_else(|| malformed("chunk end"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_parsed_with_length_or_chunks() {
        let fixed = parse_response(
        b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\ncontent-length: 2\r\n\r\n{}",
        false,
    )
    .expect("fixed-length response");
        assert_eq!(fixed.status, 401);
        assert_eq!(fixed.header("content-type"), Some("application/json"));
        assert_eq!(fixed.body, b"{}");
        let chunked = parse_response(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        false,
    )
    .expect("chunked response");
        assert_eq!(chunked.body, b"abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n", false).is_err());
    }
}
