//! Attempt records for the attempt history's tests: a sent attempt with
//! every part of an exchange (quotes, backslashes and non-ASCII text in
//! it, to be stored and read back as they are), and a hook error made
//! from it.

use webhook_core::history::{Attempt, Exchange, Hop, SentBody, SignedWith};

/// A sent attempt on `request_phid`.
pub fn sent(request_id: u64, request_phid: &str, started_ms: u64) -> Attempt {
    Attempt {
        request_id,
        request_phid: request_phid.to_owned(),
        hook_phid: "PHID-HWBH-historyaaaaaaaaaaaa".to_owned(),
        object_phid: "PHID-TASK-aaaaaaaaaaaaaaaaaaaa".to_owned(),
        claim_version: Some(1_700_000_000),
        started_ms,
        duration_ms: 42,
        status: "sent".to_owned(),
        error_type: "http".to_owned(),
        error_code: "200".to_owned(),
        http_status: Some(200),
        sent: Some(SentBody {
            bytes: 123,
            sha256: "ab".repeat(32),
            signed_with: SignedWith::CurrentAndPrevious,
        }),
        exchange: Some(Exchange {
            hops: vec![Hop {
                uri: "https://ci.example/hook?x='1'".to_owned(),
                status: 200,
            }],
            request_headers: vec![("Content-Type".to_owned(), "application/json".to_owned())],
            response_headers: vec![("X-Quote".to_owned(), "it's \"fine\" \\ ✓".to_owned())],
            response_body: "ok ✓".to_owned(),
            response_body_truncated: false,
            ..Exchange::default()
        }),
    }
}

/// A hook error written before any claim: no call, no version.
pub fn hook_error(request_id: u64, request_phid: &str, started_ms: u64) -> Attempt {
    Attempt {
        claim_version: None,
        duration_ms: 0,
        status: "failed".to_owned(),
        error_type: "hook".to_owned(),
        error_code: "not-found".to_owned(),
        http_status: None,
        sent: None,
        exchange: None,
        ..sent(request_id, request_phid, started_ms)
    }
}
