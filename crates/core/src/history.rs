//! The attempt history's records and port: what one attempt on a request
//! was ([`Attempt`]), what the transport saw of its exchange
//! ([`Exchange`]), where the dispatcher hands each attempt
//! ([`AttemptLog`]), and what a query of the history asks
//! ([`AttemptQuery`]) and gets back ([`RecordedAttempt`]).
//!
//! Phorge keeps only a request's last result, and deletes request rows
//! after a week; the history keeps every attempt, in a store of its own.
//! Nothing secret is ever part of a record: no HMAC key, no credentials of
//! a hook's URI (user-info is cut from every URI recorded), and no
//! `Authorization` or `Proxy-Authorization` value.

use serde::{Deserialize, Serialize};

use crate::model::UnixTime;

/// Response body bytes an attempt keeps unless told otherwise.
pub const BODY_KEPT_DEFAULT: usize = 4096;

/// What a request header recorded in place of a credential shows.
pub const WITHHELD: &str = "(withheld)";

/// What the transport saw of one exchange: each hop, the request's
/// headers and the final response's head and first bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// Every response received, in order: the redirects followed, then
    /// the final one (empty when no response came).
    pub hops: Vec<Hop>,
    /// The first hop's request headers as sent, in order, credentials
    /// shown as [`WITHHELD`].
    pub request_headers: Vec<(String, String)>,
    /// The last response's headers, in order.
    pub response_headers: Vec<(String, String)>,
    /// The last response body's first bytes, as text (bytes that are not
    /// UTF-8 are replaced).
    pub response_body: String,
    /// Whether the body went on past what was kept.
    pub response_body_truncated: bool,
    /// Body bytes to keep (set by the caller; not part of the record).
    #[serde(skip)]
    pub body_kept: usize,
}

impl Exchange {
    /// An empty exchange that will keep at most `body_kept` body bytes.
    pub fn keeping(body_kept: usize) -> Self {
        Self {
            body_kept,
            ..Self::default()
        }
    }
}

/// One response body being kept into an [`Exchange`]: the bytes so far,
/// decoded into its `response_body` as they come, each byte once however
/// the body is cut into chunks (a character cut between two chunks waits
/// for the next).
#[derive(Debug, Default)]
pub struct KeptBody {
    bytes: Vec<u8>,
    decoded: usize,
}

impl KeptBody {
    /// Keeps `chunk` into `exchange`, up to its bound; past it, says the
    /// body was cut.
    pub fn keep(&mut self, exchange: &mut Exchange, chunk: &[u8]) {
        let room = exchange.body_kept.saturating_sub(self.bytes.len());
        if chunk.len() > room {
            exchange.response_body_truncated = true;
        }
        self.bytes
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
        self.decode_into(&mut exchange.response_body);
    }

    /// Body bytes kept so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing is kept yet.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Appends the bytes not decoded yet to `text`, bytes that are not
    /// UTF-8 as U+FFFD; a character whose bytes have not all come waits.
    fn decode_into(&mut self, text: &mut String) {
        loop {
            let tail = &self.bytes[self.decoded..];
            match std::str::from_utf8(tail) {
                Ok(valid) => {
                    text.push_str(valid);
                    self.decoded = self.bytes.len();
                    return;
                }
                Err(err) => {
                    let valid = err.valid_up_to();
                    if let Ok(prefix) = std::str::from_utf8(&tail[..valid]) {
                        text.push_str(prefix);
                    }
                    self.decoded += valid;
                    match err.error_len() {
                        Some(invalid) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            self.decoded += invalid;
                        }
                        None => return,
                    }
                }
            }
        }
    }
}

/// One response of an exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// The URI asked, without user-info.
    pub uri: String,
    /// The response's status.
    pub status: u16,
}

/// `uri` with its user-info (anything between `://` and the `@` ending
/// the authority) removed: a hook's Basic credentials never reach a
/// record.
pub fn without_credentials(uri: &str) -> String {
    match user_info(uri) {
        Some(span) => format!("{}{}", &uri[..span.start], &uri[span.end + 1..]),
        None => uri.to_owned(),
    }
}

/// Where `uri`'s user-info lies: from after `://` up to (not including)
/// the `@` that ends it; `None` when it has none.
pub(crate) fn user_info(uri: &str) -> Option<std::ops::Range<usize>> {
    let start = uri.find("://")? + 3;
    let authority_end = uri[start..]
        .find(['/', '?', '#'])
        .map_or(uri.len(), |at| start + at);
    let at = uri[start..authority_end].rfind('@')?;
    Some(start..start + at)
}

/// The keys whose signatures an attempt carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignedWith {
    /// The hook's current key only.
    Current,
    /// The current key and, during its grace, the previous one.
    CurrentAndPrevious,
}

impl SignedWith {
    /// As stored and shown: `current` or `current_and_previous`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::CurrentAndPrevious => "current_and_previous",
        }
    }

    /// The stored text read back; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "current" => Some(Self::Current),
            "current_and_previous" => Some(Self::CurrentAndPrevious),
            _ => None,
        }
    }
}

/// The request body an attempt sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentBody {
    /// Its length in bytes.
    pub bytes: u64,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
    /// Which keys signed it.
    pub signed_with: SignedWith,
}

/// One attempt on a request: a call, or a hook error written in place of
/// one. A call this host could not make (a local failure) writes nothing
/// to Phorge and is no attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The request row's id.
    pub request_id: u64,
    /// The request's PHID.
    pub request_phid: String,
    /// Its hook's PHID.
    pub hook_phid: String,
    /// Its object's PHID.
    pub object_phid: String,
    /// The version the claim wrote; `None` for a hook error found before
    /// a claim.
    pub claim_version: Option<UnixTime>,
    /// When it started, Unix milliseconds.
    pub started_ms: u64,
    /// How long the call took, milliseconds (0 without a call).
    pub duration_ms: u64,
    /// The row's status as the attempt wrote it: `sent`, `queued` (to be
    /// tried again) or `failed`.
    pub status: String,
    /// Phorge's `errorType`: `http`, `timeout` or `hook`.
    pub error_type: String,
    /// Phorge's `errorCode`: the HTTP status, the cURL error number, or
    /// the hook error's name.
    pub error_code: String,
    /// The final response's status, when one came.
    pub http_status: Option<u16>,
    /// What was sent, when a call was made.
    pub sent: Option<SentBody>,
    /// What the transport saw, when a call was made.
    pub exchange: Option<Exchange>,
}

/// Where the dispatcher hands each attempt.
pub trait AttemptLog: Send + Sync {
    /// Takes one attempt to store. Must return at once and never fail the
    /// caller: a history that cannot keep up or cannot write drops the
    /// attempt and says so itself. Called before the attempt's result is
    /// written to Phorge's row.
    fn record(&self, attempt: Attempt);
}

/// A request named by its row id or its PHID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestKey {
    /// The row's id.
    Id(u64),
    /// The request's PHID.
    Phid(String),
}

impl RequestKey {
    /// A PHID when `text` starts with `PHID-`, else a row id; `None` when
    /// it is neither.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.starts_with("PHID-") {
            return Some(Self::Phid(text.to_owned()));
        }
        text.parse().ok().filter(|id| *id > 0).map(Self::Id)
    }
}

/// Which attempts a query asks for, newest first. Every field narrows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptQuery {
    /// One request's.
    pub request: Option<RequestKey>,
    /// One hook's.
    pub hook_phid: Option<String>,
    /// One object's.
    pub object_phid: Option<String>,
    /// Those whose status, `errorType` or `errorCode` is this text
    /// (`sent`, `failed`, `timeout`, `503`, `not-found`, …).
    pub outcome: Option<String>,
    /// Started at or after, Unix milliseconds.
    pub since_ms: Option<u64>,
    /// Started before, Unix milliseconds.
    pub until_ms: Option<u64>,
    /// At most this many.
    pub limit: usize,
}

/// An attempt as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedAttempt {
    /// The history's own id for it.
    pub id: u64,
    /// Its number among the request's attempts on record, from 1.
    pub number: u32,
    /// The daemon instance that made it (`host:pid`).
    pub instance: String,
    /// The attempt.
    #[serde(flatten)]
    pub attempt: Attempt,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_reach_a_recorded_uri() {
        assert_eq!(
            without_credentials("https://ci:s3cret@ci.example:8443/p@th?x=1"),
            "https://ci.example:8443/p@th?x=1"
        );
        assert_eq!(
            without_credentials("http://ci.example/p@th"),
            "http://ci.example/p@th"
        );
        assert_eq!(without_credentials("not a uri"), "not a uri");
    }

    #[test]
    fn a_kept_body_stops_at_its_bound_and_says_so() {
        let mut exchange = Exchange::keeping(5);
        let mut body = KeptBody::default();
        body.keep(&mut exchange, b"abc");
        assert!(!exchange.response_body_truncated);
        body.keep(&mut exchange, b"defg");
        assert_eq!(exchange.response_body, "abcde");
        assert!(exchange.response_body_truncated);
        assert_eq!(body.len(), 5);
    }

    #[test]
    fn a_character_cut_between_chunks_is_kept_whole_and_bad_bytes_replaced() {
        let mut exchange = Exchange::keeping(64);
        let mut body = KeptBody::default();
        for byte in "é€ok".as_bytes() {
            body.keep(&mut exchange, std::slice::from_ref(byte));
        }
        assert_eq!(exchange.response_body, "é€ok");
        body.keep(&mut exchange, b"\xff!");
        assert_eq!(exchange.response_body, "é€ok\u{fffd}!");
    }

    #[test]
    fn a_request_is_named_by_id_or_phid() {
        assert_eq!(RequestKey::parse(" 42 "), Some(RequestKey::Id(42)));
        assert_eq!(
            RequestKey::parse("PHID-HWBR-abc"),
            Some(RequestKey::Phid("PHID-HWBR-abc".to_owned()))
        );
        assert_eq!(RequestKey::parse("0"), None);
        assert_eq!(RequestKey::parse("abc"), None);
        assert_eq!(SignedWith::parse("current"), Some(SignedWith::Current));
    }
}
