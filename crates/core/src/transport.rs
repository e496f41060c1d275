//! The `Transport` trait: resolving a hook's URI through the outbound check
//! and POSTing one signed payload. Implementations own HTTP; the core only
//! sees results in SPEC §5's terms.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;

use crate::outcome::{DeliveryResult, TransportFailure, UriRefusal};

/// A URI that passed the outbound check, with the addresses that were
/// checked. A transport may resolve again when it connects, but must then
/// check again: whatever it connects to must have passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The hook's URI.
    pub uri: String,
    /// Checked addresses of its host.
    pub addrs: Vec<SocketAddr>,
}

/// The outcome of checking a hook's URI before claiming (SPEC §5 step 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Safe to call.
    Ready(Target),
    /// Never callable: a permanent hook error `uri`.
    Refused(UriRefusal),
    /// Resolution itself failed (timeout, SERVFAIL): a failed attempt
    /// (`http`/6), so a DNS blip cannot drop a `retry=forever` request.
    Failed(TransportFailure),
}

/// One signed POST.
#[derive(Debug, Clone)]
pub struct OutboundRequest {
    /// Where to send it, already checked.
    pub target: Target,
    /// The exact payload bytes.
    pub body: Vec<u8>,
    /// Lower-case hex HMAC-SHA256 of `body`.
    pub signature: String,
    /// The request row's PHID (stable across retries).
    pub request_phid: String,
    /// Deadline for the whole exchange, redirects included.
    pub timeout: Duration,
}

/// Sends requests to receivers.
#[async_trait]
pub trait Transport: Send + Sync {
    /// Checks a hook URI against the outbound rules and resolves its host.
    async fn resolve(&self, uri: &str) -> Resolution;

    /// POSTs the request and reports how the exchange ended. Must return by
    /// `request.timeout` with [`DeliveryResult::Timeout`] at the latest.
    async fn deliver(&self, request: OutboundRequest) -> DeliveryResult;
}
