//! What the attempt history is handed: each call's or hook error's
//! [`Attempt`], built from what the pipeline already knows and given to
//! the history's port before its result is written to Phorge's row (so a
//! store can keep it with that write). Nothing here runs with the history
//! off, and nothing here can hold up or fail a delivery: the port only
//! takes the record.

use std::time::Duration;

use ring::digest::{digest, SHA256};

use crate::history::{Attempt, Exchange, SentBody, SignedWith};
use crate::model::{RequestRow, UnixTime};
use crate::outcome::{attempt_error, DeliveryResult, HookError, ResultWrite};
use crate::properties::ErrorType;
use crate::signing::Signatures;

use super::context::Context;

/// A call's side of its attempt, noted while it is made.
pub(super) struct CallRecord {
    started_ms: u64,
    sent: SentBody,
    /// Filled by the transport.
    pub(super) exchange: Exchange,
}

/// Before a call, with the history on: when it starts, what it sends, and
/// an exchange for the transport to fill.
pub(super) fn before_call(
    cx: &Context,
    body: &[u8],
    signatures: &Signatures,
) -> Option<CallRecord> {
    let history = cx.history.as_ref()?;
    let signed_with = if signatures.phorge_previous.is_some() {
        SignedWith::CurrentAndPrevious
    } else {
        SignedWith::Current
    };
    Some(CallRecord {
        started_ms: cx.clock.now_ms(),
        sent: SentBody {
            bytes: body.len() as u64,
            sha256: hex::encode(digest(&SHA256, body)),
            signed_with,
        },
        exchange: Exchange::keeping(history.body_kept),
    })
}

/// A call's attempt (or, for a row whose host could not be resolved, the
/// failed attempt written in place of one), with the write that stores
/// its result.
pub(super) fn note_call(
    cx: &Context,
    row: &RequestRow,
    claim_version: UnixTime,
    write: &ResultWrite,
    result: &DeliveryResult,
    latency: Duration,
    call: Option<CallRecord>,
) {
    let Some(history) = &cx.history else {
        return;
    };
    let (error_type, error_code) = match attempt_error(result) {
        Some((error_type, code)) => (error_type.as_str(), code.to_string()),
        // A hop refused by the outbound check: hook error `uri`.
        None => (ErrorType::Hook.as_str(), HookError::Uri.code().to_owned()),
    };
    let http_status = match result {
        DeliveryResult::Response { status } | DeliveryResult::Throttled { status, .. } => {
            Some(*status)
        }
        _ => None,
    };
    let (started_ms, sent, exchange) = match call {
        Some(call) => (call.started_ms, Some(call.sent), Some(call.exchange)),
        None => (cx.clock.now_ms(), None, None),
    };
    history.log.record(Attempt {
        claim_version: Some(claim_version),
        started_ms,
        duration_ms: u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
        status: write.status.as_str().to_owned(),
        error_type: error_type.to_owned(),
        error_code,
        http_status,
        sent,
        exchange,
        ..identity(row)
    });
}

/// A hook error written in place of a call, on the row's version or, after
/// a claim, on the claim's.
pub(super) fn note_hook_error(
    cx: &Context,
    row: &RequestRow,
    claim_version: Option<UnixTime>,
    write: &ResultWrite,
    error: HookError,
) {
    let Some(history) = &cx.history else {
        return;
    };
    history.log.record(Attempt {
        claim_version,
        started_ms: cx.clock.now_ms(),
        status: write.status.as_str().to_owned(),
        error_type: ErrorType::Hook.as_str().to_owned(),
        error_code: error.code().to_owned(),
        ..identity(row)
    });
}

/// The request's names, and nothing of an attempt yet.
fn identity(row: &RequestRow) -> Attempt {
    Attempt {
        request_id: row.id,
        request_phid: row.phid.clone(),
        hook_phid: row.webhook_phid.clone(),
        object_phid: row.object_phid.clone(),
        claim_version: None,
        started_ms: 0,
        duration_ms: 0,
        status: String::new(),
        error_type: String::new(),
        error_code: String::new(),
        http_status: None,
        sent: None,
        exchange: None,
    }
}
