//! The `Transport` trait: resolving a hook's URI through the outbound check
//! and POSTing one signed payload. Implementations own HTTP; the core only
//! sees results in protocol §5's terms.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;

use crate::history::{user_info, Exchange};
use crate::outcome::{DeliveryResult, TransportFailure, UriRefusal};
use crate::signing::Signatures;

/// A URI that passed the outbound check, with the addresses that were
/// checked. A transport may resolve again when it connects, but must then
/// check again: whatever it connects to must have passed the check.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// The hook's URI (its user-info is the hook's Basic credentials).
    pub uri: String,
    /// Checked addresses of its host.
    pub addrs: Vec<SocketAddr>,
}

// Hand-written: the URI's user-info is a secret, and a `Debug` of the
// target must never print it.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("uri", &without_user_info(&self.uri))
            .field("addrs", &self.addrs)
            .finish()
    }
}

/// `uri` with anything between its `://` and the `@` that ends the
/// authority replaced by `***`.
fn without_user_info(uri: &str) -> String {
    match user_info(uri) {
        Some(span) => format!("{}***{}", &uri[..span.start], &uri[span.end..]),
        None => uri.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_targets_debug_never_shows_its_credentials() {
        for uri in [
            "https://ci-user:s3cret@ci.example/hook?x=1",
            "http://s3cret@ci.example",
            "https://a:b@c:s3cret@ci.example:8443/p@th",
        ] {
            let shown = format!(
                "{:?}",
                Target {
                    uri: uri.to_owned(),
                    addrs: Vec::new()
                }
            );
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(shown.contains("***@ci.example"), "{shown}");
        }
        let plain = Target {
            uri: "https://ci.example/p@th".to_owned(),
            addrs: Vec::new(),
        };
        assert!(format!("{plain:?}").contains("https://ci.example/p@th"));
    }
}

/// The outcome of checking a hook's URI before claiming (protocol §5 step 5).
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
    /// Phorge's signature header (under the current and, during a key's
    /// grace, the previous key) and the Standard Webhooks headers where
    /// enabled ([`crate::signing`]).
    pub signatures: Signatures,
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

    /// [`Self::deliver`], noting in `exchange` what was sent and received
    /// for the attempt history (each hop, the request's headers without
    /// credentials, the last response's head and first
    /// [`Exchange::body_kept`] body bytes). A transport that notes nothing
    /// leaves it empty.
    async fn deliver_recording(
        &self,
        request: OutboundRequest,
        exchange: &mut Exchange,
    ) -> DeliveryResult {
        let _ = exchange;
        self.deliver(request).await
    }
}
