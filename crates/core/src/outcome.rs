//! What one processing step writes back (protocol §5), as pure functions from a
//! delivery result or a hook error to Phorge's value domain.

use std::fmt;
use std::time::Duration;

use crate::model::{LastResult, RequestStatus, UnixTime};
use crate::properties::{ErrorCode, ErrorType, Properties};

/// A transport failure, in the terms cURL reports it (PHP's worker records
/// cURL's error number as the `errorCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportFailure {
    /// Name resolution failed (CURLE_COULDNT_RESOLVE_HOST, 6).
    Resolve,
    /// TCP connect failed or was refused (CURLE_COULDNT_CONNECT, 7).
    Connect,
    /// The server's reply was not HTTP (CURLE_WEIRD_SERVER_REPLY, 8).
    Protocol,
    /// Too many redirects (CURLE_TOO_MANY_REDIRECTS, 47).
    TooManyRedirects,
    /// TLS handshake or certificate failure (CURLE_SSL_CONNECT_ERROR, 35).
    Tls,
    /// The connection closed before any response (CURLE_GOT_NOTHING, 52).
    EmptyReply,
    /// Sending the request failed (CURLE_SEND_ERROR, 55).
    Send,
    /// Receiving the response failed, e.g. a reset (CURLE_RECV_ERROR, 56).
    Receive,
}

impl TransportFailure {
    /// cURL's error number, stored as `errorCode`.
    pub fn curl_code(self) -> i64 {
        match self {
            Self::Resolve => 6,
            Self::Connect => 7,
            Self::Protocol => 8,
            Self::Tls => 35,
            Self::TooManyRedirects => 47,
            Self::EmptyReply => 52,
            Self::Send => 55,
            Self::Receive => 56,
        }
    }

    /// The failure a stored cURL number stands for, if it is one of these.
    pub fn from_curl_code(code: i64) -> Option<Self> {
        [
            Self::Resolve,
            Self::Connect,
            Self::Protocol,
            Self::Tls,
            Self::TooManyRedirects,
            Self::EmptyReply,
            Self::Send,
            Self::Receive,
        ]
        .into_iter()
        .find(|failure| failure.curl_code() == code)
    }

    /// A stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resolve => "resolve",
            Self::Connect => "connect",
            Self::Protocol => "protocol",
            Self::Tls => "tls",
            Self::TooManyRedirects => "too_many_redirects",
            Self::EmptyReply => "empty_reply",
            Self::Send => "send",
            Self::Receive => "receive",
        }
    }
}

/// In words for a log, with cURL's number as the row stores it:
/// `connection refused or unreachable (7)`.
impl fmt::Display for TransportFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = match self {
            Self::Resolve => "host name not resolved",
            Self::Connect => "connection refused or unreachable",
            Self::Protocol => "reply was not HTTP",
            Self::Tls => "TLS handshake or certificate failed",
            Self::TooManyRedirects => "too many redirects",
            Self::EmptyReply => "connection closed before any reply",
            Self::Send => "sending the request failed",
            Self::Receive => "receiving the reply failed",
        };
        write!(f, "{words} ({})", self.curl_code())
    }
}

/// cURL's timeout number (CURLE_OPERATION_TIMEDOUT), stored as `errorCode`.
pub const CURL_TIMEOUT_CODE: i64 = 28;

/// Why a hook's URI may not be called (protocol §5 step 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UriRefusal {
    /// Not an absolute `http`/`https` URI with a host.
    Malformed(String),
    /// The host name does not exist.
    UnknownHost,
    /// A resolved address lies in the outbound deny list.
    DeniedAddress(std::net::IpAddr),
}

impl fmt::Display for UriRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(why) => write!(f, "not an http(s) URI with a host: {why}"),
            Self::UnknownHost => f.write_str("host does not exist"),
            Self::DeniedAddress(ip) => write!(f, "address {ip} is in the outbound deny list"),
        }
    }
}

/// How one HTTP exchange ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryResult {
    /// A final response (after redirects) with this status.
    Response {
        /// HTTP status code.
        status: u16,
    },
    /// A final 429 or 503 whose `Retry-After` asked the deliverer to wait:
    /// written back exactly like [`Self::Response`] with this status, and
    /// the hook is paused (see [`crate::windows::Windows::retry_after_pause`]).
    Throttled {
        /// HTTP status code (429 or 503).
        status: u16,
        /// How long the receiver asked for, unbounded (bounds are the
        /// dispatcher's).
        retry_after: Duration,
    },
    /// The whole exchange ran past the delivery timeout.
    Timeout,
    /// The exchange failed below HTTP.
    Failed(TransportFailure),
    /// A hop (e.g. a redirect) led to a URI the outbound check refuses.
    Refused(UriRefusal),
    /// This host could not make the call (out of file descriptors or
    /// memory, or its egress proxy failed): nothing reached the receiver
    /// and nothing is the receiver's fault, so nothing is written and the
    /// row is tried again.
    Local(LocalFailure),
}

/// A failure of the deliverer's own side, not of the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalFailure {
    /// The process or the system ran out of file descriptors (EMFILE,
    /// ENFILE).
    Descriptors,
    /// The kernel had no memory or buffers for a socket (ENOMEM, ENOBUFS).
    Memory,
    /// The egress proxy the call had to go through failed it.
    Proxy(ProxyFailure),
}

impl LocalFailure {
    /// A stable name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Descriptors => "descriptors",
            Self::Memory => "memory",
            Self::Proxy(_) => "proxy",
        }
    }

    /// What an operator can do about it, in a few words.
    pub fn advice(self) -> &'static str {
        match self {
            Self::Descriptors | Self::Memory => "raise LimitNOFILE or free memory?",
            Self::Proxy(failure) => failure.advice(),
        }
    }
}

/// How the egress proxy failed a call. Each is this side's failure: the
/// receiver was never asked, or its answer never came back through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyFailure {
    /// The proxy's host name could not be resolved.
    Lookup,
    /// No connection to the proxy (refused, unreachable, timed out).
    Unreachable,
    /// The proxy accepted the connection but did not answer the tunnel
    /// request within the connect timeout.
    Silent,
    /// The TLS handshake with an `https://` proxy failed.
    Tls,
    /// The proxy answered 407: its credentials are missing or wrong.
    AuthRequired,
    /// The proxy refused to open the tunnel (a 4xx other than 407).
    TunnelRefused,
    /// The proxy could not open the tunnel (a 5xx: it could not reach the
    /// receiver, or is failing itself).
    TunnelFailed,
    /// The proxy's answer to the tunnel request was not HTTP, or the
    /// connection closed before it.
    Protocol,
}

impl ProxyFailure {
    /// Every failure, in the order metrics list them.
    pub const ALL: [Self; 8] = [
        Self::Lookup,
        Self::Unreachable,
        Self::Silent,
        Self::Tls,
        Self::AuthRequired,
        Self::TunnelRefused,
        Self::TunnelFailed,
        Self::Protocol,
    ];

    /// A stable name for logs and the `reason` label of metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lookup => "lookup",
            Self::Unreachable => "unreachable",
            Self::Silent => "silent",
            Self::Tls => "tls",
            Self::AuthRequired => "auth_required",
            Self::TunnelRefused => "tunnel_refused",
            Self::TunnelFailed => "tunnel_failed",
            Self::Protocol => "protocol",
        }
    }

    fn advice(self) -> &'static str {
        match self {
            Self::Lookup | Self::Unreachable | Self::Silent | Self::Tls | Self::Protocol => {
                "is the egress proxy up and reachable?"
            }
            Self::AuthRequired => "check the proxy URL's credentials",
            Self::TunnelRefused => "does the proxy allow CONNECT to this port?",
            Self::TunnelFailed => "the proxy could not reach the receiver",
        }
    }
}

/// In words for a log: the status alone for a response (`500`), the
/// failure with cURL's number otherwise (`timed out (28)`).
impl fmt::Display for DeliveryResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Response { status } => write!(f, "{status}"),
            Self::Throttled {
                status,
                retry_after,
            } => write!(f, "{status} (Retry-After {} s)", retry_after.as_secs()),
            Self::Timeout => write!(f, "timed out ({CURL_TIMEOUT_CODE})"),
            Self::Failed(failure) => failure.fmt(f),
            Self::Refused(why) => write!(f, "refused: {why}"),
            Self::Local(failure) => failure.fmt(f),
        }
    }
}

/// In words for a log: what this host ran out of, or how its proxy failed.
impl fmt::Display for LocalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Descriptors => "this host is out of file descriptors",
            Self::Memory => "this host is out of socket memory",
            Self::Proxy(failure) => match failure {
                ProxyFailure::Lookup => "the egress proxy's name does not resolve",
                ProxyFailure::Unreachable => "the egress proxy is unreachable",
                ProxyFailure::Silent => "the egress proxy did not answer the tunnel request",
                ProxyFailure::Tls => "the TLS handshake with the egress proxy failed",
                ProxyFailure::AuthRequired => "the egress proxy wants credentials (407)",
                ProxyFailure::TunnelRefused => "the egress proxy refused the tunnel",
                ProxyFailure::TunnelFailed => "the egress proxy could not open the tunnel",
                ProxyFailure::Protocol => "the egress proxy's answer was not HTTP",
            },
        })
    }
}

impl DeliveryResult {
    /// A 2xx response.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Response { status } if (200..300).contains(status))
    }
}

/// A permanent hook-configuration error: the row fails without an HTTP
/// attempt (`failed` / `none` / epoch 0), and never counts for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookError {
    /// `properties` could not be parsed.
    InvalidProperties,
    /// The row's hook does not exist.
    NotFound,
    /// The hook's status is `disabled`.
    Disabled,
    /// The hook's URI is malformed, unknown or denied.
    Uri,
    /// The row itself holds values outside Phorge's domain.
    InvalidRow,
    /// The request's object no longer exists (Phorge's UI: "Invalid
    /// Object").
    Object,
    /// Phorge is in global silent mode and nobody else will fail the row
    /// (task adoption): what Phorge's worker writes then.
    Silent,
}

impl HookError {
    /// The `errorCode` string.
    pub fn code(self) -> &'static str {
        match self {
            Self::InvalidProperties => "invalid-properties",
            Self::NotFound => "not-found",
            Self::Disabled => "disabled",
            Self::Uri => "uri",
            Self::InvalidRow => "invalid-row",
            Self::Object => "object",
            Self::Silent => "silent",
        }
    }
}

/// The columns one write-back sets; `properties` holds the new column text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultWrite {
    /// Row id.
    pub id: u64,
    /// The version the write must find: after a claim, the one the claim
    /// wrote (so a deliverer paused past its lease cannot write over a
    /// later claim's result); without one, the version the decision was
    /// based on. Only a `queued` row at this version is written.
    pub expected_version: UnixTime,
    /// New status.
    pub status: RequestStatus,
    /// New lastRequestResult.
    pub last_request_result: LastResult,
    /// New lastRequestEpoch.
    pub last_request_epoch: UnixTime,
    /// The write's time. The store sets `dateModified = GREATEST(dateModified
    /// + 1, date_modified)`: a result written in the second of the claim (or
    /// of the insert) must still advance the version, or a failed row would
    /// look fresh (`dateModified = dateCreated`) and skip its retry spacing.
    pub date_modified: UnixTime,
    /// New properties column text.
    pub properties: String,
}

/// What a delivery attempt means for the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// 2xx: `sent` / `okay`.
    Sent,
    /// A failed attempt that stays `queued` (retry=forever).
    WillRetry,
    /// A failed attempt that ends the row (`failed`).
    GaveUp,
}

/// The `errorType` / `errorCode` an attempt records; `None` for a refused
/// hop, which is a hook error (`uri`) instead, and for a local failure,
/// which records nothing.
pub fn attempt_error(result: &DeliveryResult) -> Option<(ErrorType, i64)> {
    match result {
        DeliveryResult::Response { status } | DeliveryResult::Throttled { status, .. } => {
            Some((ErrorType::Http, i64::from(*status)))
        }
        DeliveryResult::Timeout => Some((ErrorType::Timeout, CURL_TIMEOUT_CODE)),
        DeliveryResult::Failed(failure) => Some((ErrorType::Http, failure.curl_code())),
        DeliveryResult::Refused(_) | DeliveryResult::Local(_) => None,
    }
}

/// The write-back after a claimed delivery attempt, guarded by the version
/// the claim wrote; `None` after a local failure, which writes nothing.
pub fn attempt_write(
    id: u64,
    claimed_version: UnixTime,
    properties: &Properties,
    result: &DeliveryResult,
    now: UnixTime,
) -> Option<(ResultWrite, AttemptOutcome)> {
    if let DeliveryResult::Local(_) = result {
        return None;
    }
    let Some((error_type, code)) = attempt_error(result) else {
        return Some((
            hook_error_write(id, claimed_version, properties, HookError::Uri, now),
            AttemptOutcome::GaveUp,
        ));
    };
    let mut updated = properties.clone();
    updated.set_error(error_type, &ErrorCode::Number(code));
    let (status, last, outcome) = if result.is_success() {
        (RequestStatus::Sent, LastResult::Okay, AttemptOutcome::Sent)
    } else if properties.retries_forever() {
        (
            RequestStatus::Queued,
            LastResult::Fail,
            AttemptOutcome::WillRetry,
        )
    } else {
        (
            RequestStatus::Failed,
            LastResult::Fail,
            AttemptOutcome::GaveUp,
        )
    };
    // The guard makes the stored version exactly `GREATEST(claimed + 1,
    // now)`. A row that stays queued has its epoch stamped with that same
    // value (as PHP's worker stamps both with one `time()`), so a queued
    // row whose `dateModified` differs from its `lastRequestEpoch` was
    // claimed after its last write: a call may be in flight (see
    // `Store::claims_in_flight`). A finished row keeps the plain time.
    let stamp = match status {
        RequestStatus::Queued => now.max(claimed_version.saturating_add(1)),
        RequestStatus::Sent | RequestStatus::Failed => now,
    };
    let write = ResultWrite {
        id,
        expected_version: claimed_version,
        status,
        last_request_result: last,
        last_request_epoch: stamp,
        date_modified: stamp,
        properties: updated.to_column(),
    };
    Some((write, outcome))
}

/// The write for a hook-configuration error: `failed` / `none` / epoch 0,
/// onto the row at `expected_version` (the version judged, or the claim's).
pub fn hook_error_write(
    id: u64,
    expected_version: UnixTime,
    properties: &Properties,
    error: HookError,
    now: UnixTime,
) -> ResultWrite {
    let mut updated = properties.clone();
    updated.set_error(ErrorType::Hook, &ErrorCode::Text(error.code().to_owned()));
    ResultWrite {
        id,
        expected_version,
        status: RequestStatus::Failed,
        last_request_result: LastResult::None,
        last_request_epoch: 0,
        date_modified: now,
        properties: updated.to_column(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn props(text: &str) -> Properties {
        Properties::parse(text).expect("parses")
    }

    fn error_of(write: &ResultWrite) -> (Value, Value) {
        let v: Value = serde_json::from_str(&write.properties).expect("json");
        (v["errorType"].clone(), v["errorCode"].clone())
    }

    #[test]
    fn results_read_as_words_with_the_number_the_row_stores() {
        let shown = |result: DeliveryResult| result.to_string();
        assert_eq!(shown(DeliveryResult::Response { status: 500 }), "500");
        assert_eq!(
            shown(DeliveryResult::Failed(TransportFailure::Connect)),
            "connection refused or unreachable (7)"
        );
        assert_eq!(shown(DeliveryResult::Timeout), "timed out (28)");
        assert_eq!(
            shown(DeliveryResult::Throttled {
                status: 429,
                retry_after: Duration::from_secs(30)
            }),
            "429 (Retry-After 30 s)"
        );
        assert_eq!(
            shown(DeliveryResult::Refused(UriRefusal::UnknownHost)),
            "refused: host does not exist"
        );
        assert_eq!(
            TransportFailure::from_curl_code(7),
            Some(TransportFailure::Connect)
        );
        assert_eq!(TransportFailure::from_curl_code(500), None);
        for failure in [
            TransportFailure::Resolve,
            TransportFailure::Protocol,
            TransportFailure::Tls,
            TransportFailure::TooManyRedirects,
            TransportFailure::EmptyReply,
            TransportFailure::Send,
            TransportFailure::Receive,
        ] {
            let text = failure.to_string();
            assert!(
                text.ends_with(&format!(" ({})", failure.curl_code())),
                "{text}"
            );
            assert!(!text.contains(&format!("{failure:?}")), "{text}");
            assert_eq!(
                TransportFailure::from_curl_code(failure.curl_code()),
                Some(failure)
            );
        }
    }

    #[test]
    fn success_is_sent_okay_with_integer_status() {
        let (write, outcome) = attempt_write(
            7,
            990,
            &props(r#"{"retry":"never"}"#),
            &DeliveryResult::Response { status: 200 },
            1_000,
        )
        .expect("a response is written");
        assert_eq!(outcome, AttemptOutcome::Sent);
        assert_eq!(write.status, RequestStatus::Sent);
        assert_eq!(write.last_request_result, LastResult::Okay);
        assert_eq!(write.last_request_epoch, 1_000);
        assert_eq!(write.date_modified, 1_000);
        assert_eq!(write.expected_version, 990, "guarded by the claim");
        assert_eq!(error_of(&write), (Value::from("http"), Value::from(200)));
        assert!(write.properties.starts_with(r#"{"retry":"never","#));
    }

    #[test]
    fn failures_retry_only_when_forever() {
        let cases = [
            (DeliveryResult::Response { status: 500 }, "http", 500),
            (DeliveryResult::Response { status: 302 }, "http", 302),
            (
                DeliveryResult::Throttled {
                    status: 429,
                    retry_after: Duration::from_secs(5),
                },
                "http",
                429,
            ),
            (DeliveryResult::Timeout, "timeout", 28),
            (DeliveryResult::Failed(TransportFailure::Resolve), "http", 6),
            (DeliveryResult::Failed(TransportFailure::Connect), "http", 7),
            (DeliveryResult::Failed(TransportFailure::Tls), "http", 35),
            (
                DeliveryResult::Failed(TransportFailure::EmptyReply),
                "http",
                52,
            ),
            (
                DeliveryResult::Failed(TransportFailure::Receive),
                "http",
                56,
            ),
        ];
        for (result, error_type, code) in cases {
            for (retry, status, outcome) in [
                ("forever", RequestStatus::Queued, AttemptOutcome::WillRetry),
                ("never", RequestStatus::Failed, AttemptOutcome::GaveUp),
            ] {
                let retry = props(&format!(r#"{{"retry":"{retry}"}}"#));
                let (write, got) =
                    attempt_write(1, 40, &retry, &result, 50).expect("an attempt is written");
                assert_eq!(got, outcome, "{result:?} {retry:?}");
                assert_eq!(write.expected_version, 40);
                assert_eq!(write.status, status);
                assert_eq!(write.last_request_result, LastResult::Fail);
                assert_eq!(write.last_request_epoch, 50);
                assert_eq!(
                    error_of(&write),
                    (Value::from(error_type), Value::from(code))
                );
            }
        }
    }

    #[test]
    fn refused_hop_is_a_permanent_uri_error() {
        let (write, outcome) = attempt_write(
            1,
            40,
            &props(r#"{"retry":"forever"}"#),
            &DeliveryResult::Refused(UriRefusal::UnknownHost),
            50,
        )
        .expect("a refused hop is written");
        assert_eq!(outcome, AttemptOutcome::GaveUp);
        assert_eq!(write.status, RequestStatus::Failed);
        assert_eq!(write.last_request_result, LastResult::None);
        assert_eq!(write.last_request_epoch, 0);
        assert_eq!(error_of(&write), (Value::from("hook"), Value::from("uri")));
        assert_eq!(write.expected_version, 40);
    }

    #[test]
    fn a_local_failure_writes_nothing() {
        for failure in [LocalFailure::Descriptors, LocalFailure::Memory] {
            let result = DeliveryResult::Local(failure);
            assert_eq!(attempt_error(&result), None);
            assert!(attempt_write(1, 40, &props("{}"), &result, 50).is_none());
        }
    }

    #[test]
    fn hook_errors_are_failed_none_zero_with_string_codes() {
        for error in [
            HookError::InvalidProperties,
            HookError::NotFound,
            HookError::Disabled,
            HookError::Uri,
            HookError::InvalidRow,
        ] {
            let write = hook_error_write(3, 99, &props("{}"), error, 100);
            assert_eq!(write.status, RequestStatus::Failed);
            assert_eq!(write.last_request_result, LastResult::None);
            assert_eq!(write.last_request_epoch, 0);
            assert_eq!(write.expected_version, 99);
            assert_eq!(
                error_of(&write),
                (Value::from("hook"), Value::from(error.code()))
            );
        }
    }
}
