//! The admin tool's one plain request to the daemon's diagnostics API
//! besides `watch`'s stream: `GET /api/webhook/hooks`, for its `paused`
//! list — the hooks a daemon paused because their receiver sent
//! `Retry-After`, which live in that daemon's memory, not in the database.
//! `explain` asks it; every failure comes back as one sentence, never as an
//! error of the command. Bounded in time; it changes nothing in the daemon.

use std::collections::HashMap;

use bytes::Bytes;
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;
use webhook_core::UnixTime;

use crate::watch::{StreamUrl, CONNECT_TIMEOUT};

const HOOKS_PATH: &str = "/api/webhook/hooks";

/// The answer is a count and one entry per paused hook; anything longer
/// is not the daemon's.
const BODY_LIMIT: usize = 1 << 20;

/// Why the daemon could not say, in words for one line.
pub type Unreachable = String;

/// The hooks `url`'s daemon has paused now, by PHID, with when each pause
/// ends.
pub async fn paused_hooks(
    url: &StreamUrl,
    token: Option<&str>,
) -> Result<HashMap<String, UnixTime>, Unreachable> {
    let asked = async {
        let tcp = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(connection);
        let mut request = Request::get(format!("{}{HOOKS_PATH}", url.prefix))
            .header(header::HOST, &url.authority)
            .header(
                header::USER_AGENT,
                concat!("webhook-admin/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            request = request.header("x-service-token", token);
        }
        let request = request.body(Empty::<Bytes>::new()).map_err(|e| {
            format!("cannot build the request (is GORGE_SERVICE_TOKEN printable?): {e}")
        })?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), BODY_LIMIT)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        if status != StatusCode::OK {
            let hint = match status {
                StatusCode::UNAUTHORIZED => {
                    " (set GORGE_SERVICE_TOKEN to the daemon's service token)"
                }
                _ => "",
            };
            return Err(format!("answered {}{hint}", status.as_u16()));
        }
        parse(&body)
    };
    tokio::time::timeout(CONNECT_TIMEOUT, asked)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {CONNECT_TIMEOUT:?}")))
}

/// `{"data":{"total":N,"paused":[{"hookPHID":…,"until":…},…]}}`.
fn parse(body: &[u8]) -> Result<HashMap<String, UnixTime>, Unreachable> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_owned())?;
    let Some(paused) = value["data"]["paused"].as_array() else {
        return Err(
            "the answer has no paused list (a daemon older than Retry-After pauses?)".into(),
        );
    };
    Ok(paused
        .iter()
        .filter_map(|p| Some((p["hookPHID"].as_str()?.to_owned(), p["until"].as_u64()?)))
        .collect())
}

/// `http://host:port/api/webhook/hooks`, for messages.
pub fn hooks_url(url: &StreamUrl) -> String {
    format!("http://{}{}{HOOKS_PATH}", url.authority, url.prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paused_list_is_read_by_hook() {
        let body = br#"{"data":{"total":2,"paused":[{"hookPHID":"PHID-HWBH-a","until":1700000005,"reason":"retry-after"}]}}"#;
        assert_eq!(
            parse(body),
            Ok(HashMap::from([("PHID-HWBH-a".to_owned(), 1_700_000_005)]))
        );
        assert!(parse(br#"{"data":{"total":2}}"#).is_err());
        assert!(parse(b"<html>").is_err());
    }
}
