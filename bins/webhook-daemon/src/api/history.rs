//! `GET /api/webhook/requests/{id-or-PHID}/attempts`: one request's
//! attempts, newest first, from the attempt history (its own database,
//! apart from Phorge's), so a request Phorge has already deleted still
//! answers. Without a history (`GORGE_WEBHOOK_HISTORY` off) the route says
//! so with a 404; a history that cannot be read is an opaque 503, its
//! detail logged.

use async_trait::async_trait;
use http::StatusCode;
use serde_json::json;
use tracing::warn;
use webhook_core::history::{AttemptQuery, RecordedAttempt, RequestKey};
use webhook_core::StoreError;
use webhook_store_mysql::HistoryReader;

use super::Reply;

/// The path's fixed parts around the request's id or PHID.
const PREFIX: &str = "/api/webhook/requests/";
const SUFFIX: &str = "/attempts";

/// Attempts answered when `?limit=` is not given.
pub const ATTEMPTS_DEFAULT: usize = 100;

/// The most attempts one answer holds (`?limit=` at most).
pub const ATTEMPTS_MAX: usize = 1000;

/// Where the route reads attempts: the MySQL history, or a test's double.
#[async_trait]
pub trait AttemptHistory: Send + Sync {
    /// The attempts `query` selects, newest first.
    async fn attempts(&self, query: &AttemptQuery) -> Result<Vec<RecordedAttempt>, StoreError>;
}

#[async_trait]
impl AttemptHistory for HistoryReader {
    async fn attempts(&self, query: &AttemptQuery) -> Result<Vec<RecordedAttempt>, StoreError> {
        HistoryReader::attempts(self, query).await
    }
}

/// The request's key as the path gives it, when `path` is this route's:
/// one non-slash segment between the fixed parts (possibly empty, which
/// is then a bad key rather than an unknown path).
pub(super) fn key_in(path: &str) -> Option<&str> {
    let key = path.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    (!key.contains('/')).then_some(key)
}

/// What the route was asked, or the 400 that says what is wrong.
pub(super) fn query_of(key: &str, query: Option<&str>) -> Result<AttemptQuery, Reply> {
    let request = RequestKey::parse(key).ok_or_else(|| {
        bad_request(&format!(
            "{key:?} is neither a request id (a positive integer) nor a request PHID (PHID-HWBR-...)"
        ))
    })?;
    let limit = match query
        .into_iter()
        .flat_map(|q| form_urlencoded::parse(q.as_bytes()))
        .find(|(name, _)| name == "limit")
    {
        None => ATTEMPTS_DEFAULT,
        Some((_, value)) => value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=ATTEMPTS_MAX).contains(n))
            .ok_or_else(|| {
                bad_request(&format!(
                    "limit {value:?} is not a whole number from 1 to {ATTEMPTS_MAX}"
                ))
            })?,
    };
    Ok(AttemptQuery {
        request: Some(request),
        limit,
        ..AttemptQuery::default()
    })
}

/// 200 with the attempts, the key echoed as given.
pub(super) fn found(key: &str, attempts: &[RecordedAttempt]) -> Reply {
    match serde_json::to_value(attempts) {
        Ok(attempts) => Reply::json(
            StatusCode::OK,
            &json!({"request": key, "attempts": attempts}),
        ),
        Err(err) => {
            warn!(event = "api_history_error", error = %err);
            unavailable()
        }
    }
}

/// 404: this daemon keeps no history.
pub(super) fn off() -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "ERR_HISTORY_OFF",
        "the attempt history is off on this daemon (GORGE_WEBHOOK_HISTORY)",
    )
}

/// 503 for a history that could not be read; the detail goes to the log.
pub(super) fn failed(err: &StoreError) -> Reply {
    let detail = std::error::Error::source(err).map(ToString::to_string);
    warn!(event = "api_history_error", error = %err, detail = ?detail);
    unavailable()
}

fn unavailable() -> Reply {
    Reply::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "ERR_HISTORY_UNAVAILABLE",
        "the attempt history cannot be read now; try again later",
    )
}

fn bad_request(message: &str) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, "ERR_BAD_REQUEST", message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn body(reply: &Reply) -> Value {
        serde_json::from_slice(&reply.body).unwrap_or(Value::Null)
    }

    #[test]
    fn the_key_is_one_segment_between_the_fixed_parts() {
        assert_eq!(key_in("/api/webhook/requests/42/attempts"), Some("42"));
        assert_eq!(
            key_in("/api/webhook/requests/PHID-HWBR-abc/attempts"),
            Some("PHID-HWBR-abc")
        );
        assert_eq!(key_in("/api/webhook/requests//attempts"), Some(""));
        assert_eq!(key_in("/api/webhook/requests/1/2/attempts"), None);
        assert_eq!(key_in("/api/webhook/requests/42"), None);
        assert_eq!(key_in("/api/webhook/requests/42/attempts/"), None);
    }

    #[test]
    fn limits_outside_the_range_are_refused() {
        let limit = |q: &str| query_of("7", Some(q)).map(|query| query.limit);
        assert_eq!(query_of("7", None).map(|q| q.limit), Ok(ATTEMPTS_DEFAULT));
        assert_eq!(limit("limit=1"), Ok(1));
        assert_eq!(limit("token=x&limit=1000"), Ok(1000));
        for bad in ["limit=0", "limit=1001", "limit=-1", "limit=x", "limit="] {
            let reply = limit(bad).expect_err(bad);
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad}");
            assert_eq!(body(&reply)["error"]["code"], "ERR_BAD_REQUEST");
        }
        for bad in ["0", "-3", "abc", "", "HWBR-1"] {
            assert_eq!(
                query_of(bad, None).map(|q| q.limit).map_err(|r| r.status),
                Err(StatusCode::BAD_REQUEST),
                "{bad}"
            );
        }
        assert_eq!(
            query_of("PHID-HWBR-x", None).map(|q| q.request),
            Ok(Some(RequestKey::Phid("PHID-HWBR-x".to_owned())))
        );
    }
}
