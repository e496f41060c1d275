//! `Retry-After` on a final 429 or 503 (RFC 9110 §10.2.3): how long the
//! receiver asked the deliverer to wait, as delay-seconds or an HTTP date
//! relative to the given `now`. Any other status, a date not in the
//! future, or a value that is neither asks for nothing. Bounds are the
//! dispatcher's (`Windows::retry_after_pause`), not this module's.

use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, StatusCode};
use webhook_core::DeliveryResult;

/// The result of a final response: `Throttled` when it asks for a wait,
/// else `Response`.
pub(crate) fn final_response(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> DeliveryResult {
    match requested_wait(status, headers, now) {
        Some(retry_after) => DeliveryResult::Throttled {
            status: status.as_u16(),
            retry_after,
        },
        None => DeliveryResult::Response {
            status: status.as_u16(),
        },
    }
}

/// The wait a final response asks for, if any.
pub(crate) fn requested_wait(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a very long time".
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    date.duration_since(now).ok().filter(|wait| !wait.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
    fn example_now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn wait(status: u16, value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_str(value).expect("a header value"),
        );
        let status = StatusCode::from_u16(status).expect("a status");
        requested_wait(status, &headers, example_now())
    }

    #[test]
    fn delay_seconds_and_future_dates_ask_for_a_wait() {
        let secs = |n| Some(Duration::from_secs(n));
        assert_eq!(wait(429, "5"), secs(5));
        assert_eq!(wait(503, " 120 "), secs(120));
        assert_eq!(
            wait(429, "0"),
            secs(0),
            "the dispatcher's lower bound applies"
        );
        assert_eq!(wait(429, "99999999999999999999999"), secs(u64::MAX));
        assert_eq!(wait(429, "Sun, 06 Nov 1994 08:49:47 GMT"), secs(10));
        // The obsolete forms HTTP dates may still take.
        assert_eq!(wait(503, "Sunday, 06-Nov-94 08:50:37 GMT"), secs(60));
        assert_eq!(wait(503, "Sun Nov  6 08:51:37 1994"), secs(120));
    }

    #[test]
    fn past_dates_garbage_and_other_statuses_ask_for_nothing() {
        assert_eq!(wait(429, "Sun, 06 Nov 1994 08:49:37 GMT"), None, "now");
        assert_eq!(wait(429, "Sat, 05 Nov 1994 08:49:37 GMT"), None, "past");
        for garbage in ["", "soon", "-5", "5.5", "0x10", "5 seconds"] {
            assert_eq!(wait(429, garbage), None, "{garbage:?}");
        }
        for status in [200, 500, 502, 301, 404] {
            assert_eq!(wait(status, "5"), None, "{status}");
        }
        let none = requested_wait(
            StatusCode::TOO_MANY_REQUESTS,
            &HeaderMap::new(),
            example_now(),
        );
        assert_eq!(none, None, "no header");
    }
}
