//! Domain types for the two Phorge tables the daemon reads: request rows
//! (`herald_webhookrequest`) and hooks (`herald_webhook`).
//!
//! The enums map one-to-one onto the strings Phorge stores; there is no
//! value here that Phorge's UI would not recognise.

use std::fmt;
use std::str::FromStr;

/// Unix time in whole seconds, the resolution of every epoch column.
pub type UnixTime = u64;

/// `herald_webhookrequest.status`: exactly Phorge's three values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestStatus {
    /// Waiting for delivery (also after a failed attempt with `retry=forever`).
    Queued,
    /// Delivered with a 2xx response.
    Sent,
    /// Given up on: a hook error, or a failed attempt without `retry=forever`.
    Failed,
}

impl RequestStatus {
    /// The string Phorge stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Sent => "sent",
            Self::Failed => "failed",
        }
    }
}

/// `herald_webhookrequest.lastRequestResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LastResult {
    /// No HTTP attempt was made (never tried, or a hook-configuration error).
    None,
    /// The last attempt got a 2xx.
    Okay,
    /// The last attempt failed; these rows feed the breaker.
    Fail,
}

impl LastResult {
    /// The string Phorge stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Okay => "okay",
            Self::Fail => "fail",
        }
    }
}

/// A stored string outside Phorge's value domain for its column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {column} value {value:?}")]
pub struct UnknownValue {
    /// The column the value came from.
    pub column: &'static str,
    /// The value as stored.
    pub value: String,
}

impl FromStr for RequestStatus {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "queued" => Ok(Self::Queued),
            "sent" => Ok(Self::Sent),
            "failed" => Ok(Self::Failed),
            other => Err(UnknownValue {
                column: "status",
                value: other.to_owned(),
            }),
        }
    }
}

impl FromStr for LastResult {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "okay" => Ok(Self::Okay),
            "fail" => Ok(Self::Fail),
            other => Err(UnknownValue {
                column: "lastRequestResult",
                value: other.to_owned(),
            }),
        }
    }
}

impl fmt::Display for RequestStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for LastResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `herald_webhookrequest`, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRow {
    /// Primary key; candidates are taken in ascending id order.
    pub id: u64,
    /// `PHID-HWBR-…`.
    pub phid: String,
    /// The hook this request is for.
    pub webhook_phid: String,
    /// The edited object.
    pub object_phid: String,
    /// Lifecycle status.
    pub status: RequestStatus,
    /// The raw `properties` column (a JSON object written by PHP).
    pub properties: String,
    /// Result of the last HTTP attempt.
    pub last_request_result: LastResult,
    /// When the last HTTP attempt finished; 0 = never.
    pub last_request_epoch: UnixTime,
    /// Set by Phorge on insert; also the payload's `epoch`.
    pub date_created: UnixTime,
    /// Bumped on every save: the claim version.
    pub date_modified: UnixTime,
    /// Set by a store when a stored value lies outside Phorge's domain (a
    /// PHID that is not UTF-8, an unknown `lastRequestResult`); the text
    /// fields then hold a lossy reading. The dispatcher fails such a row as
    /// hook error `invalid-row` without claiming it, so one bad row cannot
    /// stall the queue.
    pub defect: Option<String>,
}

impl RequestRow {
    /// A row no deliverer has touched yet: the candidate query takes it at once.
    pub fn is_fresh(&self) -> bool {
        self.date_modified == self.date_created
    }
}

/// One row of `herald_webhook`.
#[derive(Clone, PartialEq, Eq)]
pub struct Hook {
    /// `PHID-HWBH-…`.
    pub phid: String,
    /// Display name, for logs and the admin tool.
    pub name: String,
    /// Where requests are POSTed.
    pub uri: String,
    /// `enabled`, `firehose` or `disabled`; kept as stored.
    pub status: String,
    /// 32 characters used as raw ASCII bytes for HMAC-SHA256.
    pub hmac_key: String,
}

impl Hook {
    /// Only exactly `disabled` stops delivery; every other value delivers.
    pub fn is_disabled(&self) -> bool {
        self.status == "disabled"
    }
}

// Hand-written so a key never reaches a log through `{:?}`.
impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hook")
            .field("phid", &self.phid)
            .field("name", &self.name)
            .field("status", &self.status)
            .field("uri", &"<redacted>")
            .field("hmac_key", &"<redacted>")
            .finish()
    }
}

/// The type code of a PHID for the payload's `object.type`: the four bytes
/// after `PHID-` when a `-` follows them, else `????` (PHP's
/// `phid_get_type`, whose regex works on bytes, not characters).
pub fn phid_type(phid: &str) -> &str {
    const UNKNOWN: &str = "????";
    let bytes = phid.as_bytes();
    if bytes.len() < 10 || !bytes.starts_with(b"PHID-") || bytes[9] != b'-' {
        return UNKNOWN;
    }
    if bytes[5..9].contains(&b'-') {
        return UNKNOWN;
    }
    // Bytes 4 and 9 are ASCII `-`, so 5..9 always lies on character
    // boundaries; `get` keeps that reasoning out of the panic path.
    phid.get(5..9).unwrap_or(UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_strings_round_trip() {
        for s in [
            RequestStatus::Queued,
            RequestStatus::Sent,
            RequestStatus::Failed,
        ] {
            assert_eq!(s.as_str().parse::<RequestStatus>(), Ok(s));
        }
        for r in [LastResult::None, LastResult::Okay, LastResult::Fail] {
            assert_eq!(r.as_str().parse::<LastResult>(), Ok(r));
        }
        assert!("claimed".parse::<RequestStatus>().is_err());
        assert!("Okay".parse::<LastResult>().is_err());
    }

    #[test]
    fn phid_type_follows_phps_regex() {
        assert_eq!(phid_type("PHID-TASK-abcdefghijklmnopqrst"), "TASK");
        assert_eq!(phid_type("PHID-TEST-a/b"), "TEST");
        assert_eq!(phid_type("PHID-TAS-abc"), "????");
        assert_eq!(phid_type("PHID-TASKS-abc"), "????");
        assert_eq!(phid_type("PHID-TASK"), "????");
        assert_eq!(phid_type("phid-TASK-abc"), "????");
        assert_eq!(phid_type(""), "????");
        // "TÉS" is four bytes: PHP's byte-wise regex accepts it.
        assert_eq!(phid_type("PHID-T\u{c9}S-x"), "T\u{c9}S");
        // "TT中" is five bytes: too long for PHP's regex.
        assert_eq!(phid_type("PHID-TT\u{4e2d}-x"), "????");
        assert_eq!(phid_type("PHID-T\u{4e2d}-x"), "T\u{4e2d}");
    }

    #[test]
    fn hook_debug_redacts_secrets() {
        let hook = Hook {
            phid: "PHID-HWBH-x".into(),
            name: "n".into(),
            uri: "https://secret.example/".into(),
            status: "enabled".into(),
            hmac_key: "abcdefghijklmnopqrstuvwxyz234567".into(),
        };
        let text = format!("{hook:?}");
        assert!(!text.contains("secret.example"));
        assert!(!text.contains("abcdefghij"));
        assert!(!hook.is_disabled());
    }
}
