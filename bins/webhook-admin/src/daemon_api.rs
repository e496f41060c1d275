//! The admin tool's one plain request to the daemon's diagnostics API
//! besides `watch`'s stream: `GET /api/webhook/hooks/state`, for what
//! lives in that daemon's memory, not in the database: its `paused` list
//! (hooks whose receiver sent `Retry-After`) and its `keyGrace` list (hooks
//! whose previous HMAC key still signs). `explain` and `hooks` ask it;
//! every failure comes back as one sentence, never as an error of the
//! command. Bounded in time; it changes nothing in the daemon.

use std::collections::HashMap;

use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use serde_json::Value;
use webhook_core::UnixTime;

use crate::watch::{get_from_daemon, DaemonGetError, StreamUrl, CONNECT_TIMEOUT};

const STATE_PATH: &str = "/api/webhook/hooks/state";

/// The answer is one entry per paused hook and per key grace; anything
/// longer is not the daemon's.
const BODY_LIMIT: usize = 1 << 20;

/// Why the daemon could not say, in words for one line.
pub type Unreachable = String;

/// What a daemon knows of hooks that the database does not, by hook PHID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonHooks {
    /// When each Retry-After pause ends.
    pub paused: HashMap<String, UnixTime>,
    /// When each previous key stops signing.
    pub key_grace: HashMap<String, UnixTime>,
}

/// What `url`'s daemon knows of its hooks now.
pub async fn daemon_hooks(
    url: &StreamUrl,
    token: Option<&str>,
) -> Result<DaemonHooks, Unreachable> {
    let asked = async {
        let response = get_from_daemon(url, STATE_PATH, None, token)
            .await
            .map_err(DaemonGetError::into_reason)?;
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

/// `{"data":{"paused":[{"hookPHID":…,"until":…},…],"keyGrace":[…]}}`.
fn parse(body: &[u8]) -> Result<DaemonHooks, Unreachable> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_owned())?;
    let list = |name: &str| {
        value["data"][name]
            .as_array()
            .map(|entries| by_hook(entries))
            .ok_or_else(|| format!("the answer has no {name} list"))
    };
    Ok(DaemonHooks {
        paused: list("paused")?,
        key_grace: list("keyGrace")?,
    })
}

fn by_hook(entries: &[Value]) -> HashMap<String, UnixTime> {
    entries
        .iter()
        .filter_map(|p| Some((p["hookPHID"].as_str()?.to_owned(), p["until"].as_u64()?)))
        .collect()
}

/// `http://host:port/api/webhook/hooks/state`, for messages.
pub fn state_url(url: &StreamUrl) -> String {
    format!("http://{}{}{STATE_PATH}", url.authority, url.prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paused_and_key_grace_lists_are_read_by_hook() {
        let body = br#"{"data":{"paused":[{"hookPHID":"PHID-HWBH-a","until":1700000005,"reason":"retry-after"}],"keyGrace":[{"hookPHID":"PHID-HWBH-b","until":1700086400}]}}"#;
        assert_eq!(
            parse(body),
            Ok(DaemonHooks {
                paused: HashMap::from([("PHID-HWBH-a".to_owned(), 1_700_000_005)]),
                key_grace: HashMap::from([("PHID-HWBH-b".to_owned(), 1_700_086_400)]),
            })
        );
        let none = br#"{"data":{"paused":[],"keyGrace":[]}}"#;
        assert_eq!(parse(none), Ok(DaemonHooks::default()));
        // `/api/webhook/hooks`' count is not the hooks' state.
        assert_eq!(
            parse(br#"{"data":{"total":2}}"#),
            Err("the answer has no paused list".to_owned())
        );
        assert_eq!(
            parse(br#"{"data":{"paused":[]}}"#),
            Err("the answer has no keyGrace list".to_owned())
        );
        assert!(parse(b"<html>").is_err());
    }
}
