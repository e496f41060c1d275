//! [`HyperTransport`]: the `webhook_core::Transport` that speaks HTTP to
//! receivers. It owns the pooled client, builds the request Phorge's worker sends
//! (with the Basic authentication [`crate::auth`] decides on), follows
//! redirects the way PHP's cURL does, bounds everything by the delivery
//! deadline, and reads (a bounded part of) the response body only to
//! discard it, or, for the attempt history, to keep its first bytes.

use std::convert::Infallible;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONNECTION, CONTENT_TYPE, LOCATION,
    PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, SET_COOKIE, USER_AGENT,
};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body as _, Incoming};
use hyper_util::client::legacy::connect::capture_connection;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio_rustls::TlsConnector;
use tracing::debug;
use webhook_core::history::{self, without_credentials, Exchange, KeptBody, WITHHELD};
use webhook_core::{
    DeliveryResult, LocalFailure, OutboundRequest, ProxyFailure, Resolution, Target, Transport,
    TransportFailure, UriRefusal,
};

use crate::auth::BasicAuth;
use crate::classify::{classify, Stage};
use crate::client_tls::{client_config, BuildError};
use crate::config::{
    CheckedTransportConfig, RESPONSE_HEAD_GROWING_MAX, STANDARD_ID, STANDARD_SIGNATURE,
    STANDARD_TIMESTAMP,
};
use crate::connector::{
    resolve_checked, ConnectionUsage, GuardedConnector, HopError, TcpConnector,
};
use crate::lookup::{NameLookup, SystemLookup};
use crate::policy::OutboundPolicy;
use crate::proxy::{Proxies, Route};
use crate::retry_after::final_response;
use crate::tunnel::ProxyDialer;
use crate::uri::HookUri;

/// Request bodies: the payload, or nothing after a 301/302/303. Boxed:
/// every connection's dispatch queue is allocated 32 requests at a time,
/// so each byte of the request type costs 32 per open connection.
type RequestBody = BoxBody<Bytes, Infallible>;

/// The hyper + rustls transport. Cheap to share behind an `Arc`; one
/// instance keeps one connection pool.
#[derive(Debug)]
pub struct HyperTransport {
    client: Client<GuardedConnector, RequestBody>,
    lookup: Arc<dyn NameLookup>,
    policy: Arc<OutboundPolicy>,
    proxies: Arc<Proxies>,
    dialer: ProxyDialer,
    headers: FixedHeaders,
    max_redirects: u32,
    response_body_limit: usize,
    resolve_timeout: Duration,
}

/// Headers that are the same on every request.
#[derive(Debug)]
struct FixedHeaders {
    signature: Vec<http::HeaderName>,
    /// Each signature header's `-Previous` twin, in the same order.
    previous_signature: Vec<http::HeaderName>,
    user_agent: HeaderValue,
    request_id: Option<http::HeaderName>,
}

/// What one hop of a delivery sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HopMethod {
    /// POST with the payload.
    PostPayload,
    /// POST with an empty body (after 301/302/303).
    PostEmpty,
}

/// One hop of a delivery: where it goes and what it sends.
struct Hop<'a> {
    uri: &'a HookUri,
    method: HopMethod,
    /// Sensitive; never logged.
    authorization: Option<HeaderValue>,
}

/// What to do with a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Its status is the delivery's result.
    Final,
    /// Follow `location` with this method.
    Follow {
        /// The raw `Location` value.
        location: String,
        /// The next hop's method.
        method: HopMethod,
    },
}

/// cURL's default redirect rules for a POST (no `CURLOPT_POSTREDIR`) as PHP
/// sets it up: 301/302/303 drop the body, but the method stays POST because
/// HTTPSFuture names it with `CURLOPT_CUSTOMREQUEST`; 307/308 repeat the
/// request as it was. Any other status, or a redirect without a usable
/// `Location`, is final.
pub(crate) fn next_step(
    status: StatusCode,
    location: Option<&HeaderValue>,
    current: HopMethod,
) -> Next {
    let method = match status.as_u16() {
        301..=303 => HopMethod::PostEmpty,
        307 | 308 => current,
        _ => return Next::Final,
    };
    match location.map(|value| encode_location(value.as_bytes())) {
        Some(location) if !location.is_empty() => Next::Follow { location, method },
        _ => Next::Final,
    }
}

/// A `Location` value as a URI reference: surrounding whitespace trimmed,
/// and spaces, control and 8-bit bytes and the characters a URI may not
/// hold percent-encoded, as cURL does before following it.
pub(crate) fn encode_location(raw: &[u8]) -> String {
    let trimmed = raw.trim_ascii();
    let mut out = String::with_capacity(trimmed.len());
    for &byte in trimmed {
        if byte <= b' ' || byte >= 0x7f || b"\"<>\\^`{|}".contains(&byte) {
            out.push_str(&format!("%{byte:02X}"));
        } else {
            out.push(char::from(byte));
        }
    }
    out
}

impl HyperTransport {
    /// Builds the client from checked settings, resolving names with the
    /// system resolver (`getaddrinfo`).
    pub fn new(config: CheckedTransportConfig) -> Result<Self, BuildError> {
        Self::with_lookup(config, Arc::new(SystemLookup))
    }

    /// Like [`HyperTransport::new`], resolving names with `lookup`.
    pub fn with_lookup(
        config: CheckedTransportConfig,
        lookup: Arc<dyn NameLookup>,
    ) -> Result<Self, BuildError> {
        let (config, valid) = config.into_parts();
        let policy = Arc::new(OutboundPolicy::new(
            config.outbound_deny.clone(),
            config.outbound_allow.clone(),
        ));
        let tls = client_config(valid.extra_roots)?;
        let proxies = Arc::new(config.proxies.clone());
        let dialer = ProxyDialer {
            lookup: Arc::clone(&lookup),
            tls: TlsConnector::from(Arc::new(tls.clone())),
            timeout: config.connect_timeout,
        };
        let tcp = TcpConnector::new(
            Arc::clone(&lookup),
            Arc::clone(&policy),
            Arc::clone(&proxies),
            dialer.clone(),
            config.connect_timeout,
        );
        // ALPN offers h2 and http/1.1; plain http:// stays HTTP/1.1.
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let connector = GuardedConnector::new(https, Arc::clone(&proxies), config.connect_timeout);
        let mut client = Client::builder(TokioExecutor::new());
        match config.response_head_max {
            // hyper's buffer, growing from 8 KiB as a head needs, up to
            // cURL's bound.
            0 => client.http1_max_buf_size(RESPONSE_HEAD_GROWING_MAX),
            // One read buffer of exactly this size per connection, and the
            // longest head it accepts.
            bound => client.http1_read_buf_exact_size(bound),
        };
        let client = client
            // cURL writes header names as PHP gave them: `Content-Type`,
            // `X-Phabricator-Webhook-Signature`, `Host`, ...
            .http1_title_case_headers(true)
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .build(connector);

        Ok(Self {
            client,
            lookup,
            policy,
            proxies,
            dialer,
            headers: FixedHeaders {
                previous_signature: valid.previous_signature_headers,
                signature: valid.signature_headers,
                user_agent: valid.user_agent,
                request_id: valid.request_id_header,
            },
            max_redirects: config.max_redirects,
            response_body_limit: config.response_body_limit,
            resolve_timeout: config.resolve_timeout,
        })
    }

    /// One hop's request, its headers in cURL's order (hyper adds `Host`,
    /// and `Content-Length` for the payload).
    fn build_request(
        &self,
        hop: &Hop<'_>,
        request: &OutboundRequest,
        body: &Bytes,
    ) -> Result<Request<RequestBody>, http::Error> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(hop.uri.uri().clone());
        if let Some(authorization) = &hop.authorization {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        if let Route::Forward(proxy) = self.route(hop.uri) {
            // The proxy reads it from a forwarded request; a tunnel carries
            // it in its CONNECT instead, never to the receiver.
            if let Some(credentials) = proxy.authorization() {
                builder = builder.header(PROXY_AUTHORIZATION, credentials.clone());
            }
            // The host was checked when this connection to the proxy was
            // made, and the proxy resolves it again for every request: a
            // pooled connection would carry the next request unchecked.
            builder = builder.header(CONNECTION, HeaderValue::from_static("close"));
        }
        builder = builder
            .header(USER_AGENT, self.headers.user_agent.clone())
            .header(ACCEPT, HeaderValue::from_static("*/*"))
            // What Phorge's cURL asks for. A compressed answer costs
            // nothing: the body is read only to be discarded (the history
            // keeps its first bytes as received, never decoded).
            .header(ACCEPT_ENCODING, HeaderValue::from_static("gzip"))
            // cURL keeps custom headers on every hop, so `Content-Type` and
            // the signature stay after a 301/302/303 too.
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let signatures = &request.signatures;
        for name in &self.headers.signature {
            builder = builder.header(name, signatures.phorge.as_str());
        }
        if let Some(previous) = &signatures.phorge_previous {
            for name in &self.headers.previous_signature {
                builder = builder.header(name, previous.as_str());
            }
        }
        if let Some(standard) = &signatures.standard {
            builder = builder
                .header(STANDARD_ID, standard.id.as_str())
                .header(STANDARD_TIMESTAMP, standard.timestamp)
                .header(STANDARD_SIGNATURE, standard.signature.as_str());
        }
        if let Some(name) = &self.headers.request_id {
            builder = builder.header(name, request.request_phid.as_str());
        }
        match hop.method {
            HopMethod::PostPayload => builder.body(Full::new(body.clone()).boxed()),
            // An empty body goes out on HTTP/1.1 without a `Content-Length`,
            // as cURL sends it (hyper writes one only for a body it sends).
            HopMethod::PostEmpty => builder.body(Empty::new().boxed()),
        }
    }

    /// Reaches each egress proxy in force as a call would (TCP, then TLS
    /// for an `https://` proxy), asking it nothing: each proxy as
    /// [`Proxies::shown`] names it, and how reaching it failed.
    pub async fn reach_proxies(&self) -> Vec<(String, Result<(), ProxyFailure>)> {
        let mut reached = Vec::new();
        for server in self.proxies.servers() {
            let result = match self.dialer.connect(server).await {
                Ok(_) => Ok(()),
                Err(HopError::Proxy(why)) => Err(why),
                Err(_) => Err(ProxyFailure::Unreachable),
            };
            reached.push((server.shown(), result));
        }
        reached
    }

    /// The egress proxies in force.
    pub fn proxies(&self) -> &Proxies {
        &self.proxies
    }

    /// How a hop to `uri` goes out.
    fn route(&self, uri: &HookUri) -> Route<'_> {
        self.proxies.route(uri.scheme() == "https", uri.host())
    }

    /// The whole exchange, without the deadline (the caller applies it).
    ///
    /// With `record`, what was sent and received is noted in it as the
    /// exchange goes, so that a deadline that drops this future midway
    /// leaves what was seen until then; without, nothing is copied or kept.
    async fn exchange(
        &self,
        request: &OutboundRequest,
        mut record: Option<&mut Exchange>,
    ) -> DeliveryResult {
        let mut uri = match HookUri::parse(&request.target.uri) {
            Ok(uri) => uri,
            Err(why) => return DeliveryResult::Refused(UriRefusal::Malformed(why)),
        };
        let body = Bytes::copy_from_slice(&request.body);
        let mut auth = BasicAuth::new(&uri);
        let mut method = HopMethod::PostPayload;
        let mut followed = 0u32;
        loop {
            let hop = Hop {
                uri: &uri,
                method,
                authorization: auth.header(&uri),
            };
            // Only the first hop's request headers are recorded: later
            // hops differ only by what the redirect rules change.
            let note_request = if followed == 0 {
                record.as_deref_mut()
            } else {
                None
            };
            let response = match self.send_hop(&hop, request, &body, note_request).await {
                Ok(response) => response,
                Err(result) => return result,
            };
            let status = response.status();
            if let Some(exchange) = record.as_deref_mut() {
                note_response(exchange, &uri, &response);
            }
            if status == StatusCode::PROXY_AUTHENTICATION_REQUIRED
                && response.headers().contains_key(PROXY_AUTHENTICATE)
                && matches!(self.route(&uri), Route::Forward(_))
            {
                // The proxy's own answer to a forwarded request (a proxy
                // asking for credentials names its scheme): the receiver
                // was not asked.
                return DeliveryResult::Local(LocalFailure::Proxy(ProxyFailure::AuthRequired));
            }
            let next = if self.max_redirects == 0 {
                Next::Final
            } else {
                next_step(status, response.headers().get(LOCATION), method)
            };
            match next {
                Next::Final => {
                    let answer = final_response(status, response.headers(), SystemTime::now());
                    let drained = drain(
                        response.into_body(),
                        self.response_body_limit,
                        record.as_deref_mut(),
                    )
                    .await;
                    return match drained {
                        Ok(()) => answer,
                        Err(err) => {
                            let result = classify(&err, Stage::Body);
                            debug!(event = "response_body_failed", request = %request.request_phid,
                                   status = status.as_u16(), result = %result, error = %webhook_core::error_chain(&err));
                            result
                        }
                    };
                }
                Next::Follow {
                    location,
                    method: next_method,
                } => {
                    if followed == self.max_redirects {
                        return DeliveryResult::Failed(TransportFailure::TooManyRedirects);
                    }
                    let next_uri = match uri.join(&location) {
                        Ok(next_uri) => next_uri,
                        Err(why) => return DeliveryResult::Refused(UriRefusal::Malformed(why)),
                    };
                    // Reading the redirect's body lets its connection be
                    // reused; its errors do not decide anything.
                    let _ = drain(
                        response.into_body(),
                        self.response_body_limit,
                        record.as_deref_mut(),
                    )
                    .await;
                    followed += 1;
                    debug!(event = "redirect_followed", request = %request.request_phid,
                           status = status.as_u16(), hop = followed, location = %next_uri.origin());
                    auth.follow(&uri, &next_uri);
                    uri = next_uri;
                    method = next_method;
                }
            }
        }
    }

    /// Sends one hop and returns the response head. Like cURL, a request
    /// that dies without a byte of answer on a connection reused from the
    /// pool is sent once more: the receiver most likely closed that idle
    /// connection as the request went out. With `note`, the request's
    /// headers are noted in it as built, once (a retry sends the same).
    async fn send_hop(
        &self,
        hop: &Hop<'_>,
        request: &OutboundRequest,
        body: &Bytes,
        mut note: Option<&mut Exchange>,
    ) -> Result<Response<Incoming>, DeliveryResult> {
        let mut retried = false;
        loop {
            let mut outgoing = self
                .build_request(hop, request, body)
                // Only a header value that cannot be sent (e.g. a control
                // character in a PHID) gets here.
                .map_err(|_| DeliveryResult::Failed(TransportFailure::Send))?;
            if let Some(exchange) = note.take() {
                note_request_headers(exchange, outgoing.headers());
            }
            let connection = capture_connection(&mut outgoing);
            match self.client.request(outgoing).await {
                Ok(response) => {
                    if let Some(usage) = response.extensions().get::<ConnectionUsage>() {
                        usage.count_response();
                    }
                    return Ok(response);
                }
                Err(err) => {
                    let result = classify(&err, Stage::Head);
                    let stale = connection
                        .connection_metadata()
                        .as_ref()
                        .filter(|connected| !connected.is_negotiated_h2())
                        .and_then(ConnectionUsage::of)
                        .is_some_and(|usage| usage.was_reused() && usage.received_nothing());
                    let retryable = matches!(
                        result,
                        DeliveryResult::Failed(
                            TransportFailure::EmptyReply
                                | TransportFailure::Receive
                                | TransportFailure::Send
                        )
                    );
                    debug!(event = "request_failed", request = %request.request_phid,
                           result = %result, reused_connection = stale, error = %webhook_core::error_chain(&err));
                    if retryable && stale && !retried {
                        retried = true;
                        continue;
                    }
                    return Err(result);
                }
            }
        }
    }
}

/// Reads and drops the body until its end or until `limit` bytes were
/// read. Stopping early drops the connection instead of returning it to
/// the pool. Nothing is kept, unless `record` asks for the body's first
/// [`Exchange::body_kept`] bytes: it then never reads more than it would
/// without.
async fn drain(
    mut body: Incoming,
    limit: usize,
    mut record: Option<&mut Exchange>,
) -> Result<(), hyper::Error> {
    let mut kept = KeptBody::default();
    if let Some(exchange) = record.as_deref_mut() {
        // Until the body is known to have ended within what was kept: a
        // deadline or an error midway leaves the record saying so.
        exchange.response_body_truncated = true;
    }
    let mut read = 0usize;
    while read < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                let data = frame.data_ref().map_or(&[][..], |data| data.as_ref());
                read = read.saturating_add(data.len());
                if let Some(exchange) = record.as_deref_mut() {
                    // Past the bound there is nothing more to keep.
                    if kept.len() < exchange.body_kept && !data.is_empty() {
                        kept.keep(exchange, data);
                    }
                }
            }
            Some(Err(err)) => return Err(err),
            None => {
                if let Some(exchange) = record {
                    exchange.response_body_truncated = read > kept.len();
                }
                return Ok(());
            }
        }
    }
    if let Some(exchange) = record {
        // Stopped at the limit: unread bytes may follow.
        exchange.response_body_truncated = read > kept.len() || !body.is_end_stream();
    }
    Ok(())
}

/// Notes a request's headers as built: names as `http` gives them (lower
/// case), credentials as [`WITHHELD`]. The signature headers are HMAC
/// outputs, not keys, and are kept.
fn note_request_headers(exchange: &mut Exchange, headers: &http::HeaderMap) {
    exchange.request_headers = noted(headers);
}

/// `headers` as the attempt history keeps them: names as `http` gives
/// them, values as text, and the values that carry credentials —
/// `Authorization` and `Proxy-Authorization` sent, `Set-Cookie` received —
/// as [`WITHHELD`].
fn noted(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let secret = [AUTHORIZATION, PROXY_AUTHORIZATION, SET_COOKIE].contains(name);
            let shown = match secret {
                true => WITHHELD.to_owned(),
                false => String::from_utf8_lossy(value.as_bytes()).into_owned(),
            };
            (name.as_str().to_owned(), shown)
        })
        .collect()
}

/// Notes a response as it arrives: a hop (its URI without user-info), and
/// its head as the last response's, replacing an earlier hop's head and
/// body (values as text, bytes that are not UTF-8 replaced).
fn note_response(exchange: &mut Exchange, uri: &HookUri, response: &Response<Incoming>) {
    exchange.hops.push(history::Hop {
        // `HookUri` holds no user-info; cut again all the same, as every
        // URI recorded is.
        uri: without_credentials(&uri.uri().to_string()),
        status: response.status().as_u16(),
    });
    exchange.response_headers = noted(response.headers());
    exchange.response_body.clear();
    // Until its body is read: a body left unread (a redirect not followed,
    // a deadline before it) went on past the nothing that was kept.
    exchange.response_body_truncated = !response.body().is_end_stream();
}

#[async_trait]
impl Transport for HyperTransport {
    async fn resolve(&self, uri: &str) -> Resolution {
        let hook = match HookUri::parse(uri) {
            Ok(hook) => hook,
            Err(why) => return Resolution::Refused(UriRefusal::Malformed(why)),
        };
        let ips = match hook.ip_literal() {
            Some(ip) => match self.policy.first_denied([ip]) {
                Some(denied) => return Resolution::Refused(UriRefusal::DeniedAddress(denied)),
                None => vec![ip],
            },
            None => {
                let lookup = resolve_checked(self.lookup.as_ref(), &self.policy, hook.host());
                match tokio::time::timeout(self.resolve_timeout, lookup).await {
                    Ok(Ok(ips)) => ips,
                    Ok(Err(HopError::Refused(why))) => return Resolution::Refused(why),
                    Ok(Err(_)) | Err(_) => return Resolution::Failed(TransportFailure::Resolve),
                }
            }
        };
        let port = hook.port();
        Resolution::Ready(Target {
            uri: uri.to_owned(),
            addrs: ips
                .into_iter()
                .map(|ip| std::net::SocketAddr::new(ip, port))
                .collect(),
        })
    }

    async fn deliver(&self, request: OutboundRequest) -> DeliveryResult {
        // One deadline for everything: connect, TLS, send, response, body,
        // every redirect hop. Dropping the exchange drops its connection,
        // so a stalled receiver holds nothing past it.
        within_deadline(pin!(self.exchange(&request, None)), request.timeout).await
    }

    async fn deliver_recording(
        &self,
        request: OutboundRequest,
        exchange: &mut Exchange,
    ) -> DeliveryResult {
        // The same exchange under the same deadline, noting into `exchange`
        // as it goes: a deadline that drops it keeps what was noted.
        within_deadline(
            pin!(self.exchange(&request, Some(exchange))),
            request.timeout,
        )
        .await
    }
}

/// How long an exchange is still polled once its deadline has passed.
///
/// A process that was paused (SIGSTOP, a frozen VM, a long GC pause of the
/// host) wakes with the deadline's timer and the response's readiness
/// arriving together. The exchange learns of a response only when hyper's
/// connection task has read it from the socket, and that task may not have
/// run yet when the timer is seen: without this, an answer the receiver
/// gave in time is recorded as a timeout and sent again. 50 ms is ample
/// for a runnable task to run and short beside any delivery timeout.
pub(crate) const LAST_CHANCE: Duration = Duration::from_millis(50);

/// `exchange`'s result if it finishes within `deadline` (or within
/// [`LAST_CHANCE`] after it), else [`DeliveryResult::Timeout`].
///
/// `exchange` comes pinned by the caller: taken by value and pinned here,
/// it would be stored twice in every delivery's future.
pub(crate) async fn within_deadline(
    mut exchange: Pin<&mut impl std::future::Future<Output = DeliveryResult>>,
    deadline: Duration,
) -> DeliveryResult {
    if let Ok(result) = tokio::time::timeout(deadline, &mut exchange).await {
        return result;
    }
    match tokio::time::timeout(LAST_CHANCE, &mut exchange).await {
        Ok(result) => {
            debug!(event = "response_after_deadline_kept", result = %result);
            result
        }
        Err(_) => DeliveryResult::Timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response handed over the way hyper hands one over: another task
    /// (the connection task) must run before the exchange sees it. It is
    /// woken at `at` and needs one more turn of the scheduler, as reading
    /// the socket does.
    fn answer_at(
        at: Duration,
        result: DeliveryResult,
    ) -> tokio::sync::oneshot::Receiver<DeliveryResult> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep_until(start + at).await;
            tokio::task::yield_now().await;
            let _ = tx.send(result);
        });
        rx
    }

    async fn received(rx: tokio::sync::oneshot::Receiver<DeliveryResult>) -> DeliveryResult {
        rx.await
            .unwrap_or(DeliveryResult::Failed(TransportFailure::Receive))
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_ready_as_the_deadline_fires_is_not_a_timeout() {
        // After a pause, the deadline and the response are due at the same
        // instant; the timer is seen before the connection task has run.
        let deadline = Duration::from_secs(15);
        let rx = answer_at(deadline, DeliveryResult::Response { status: 200 });
        let started = tokio::time::Instant::now();
        let result = within_deadline(pin!(received(rx)), deadline).await;
        assert_eq!(result, DeliveryResult::Response { status: 200 });
        assert_eq!(started.elapsed(), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_after_the_last_chance_is_a_timeout() {
        let deadline = Duration::from_secs(15);
        let rx = answer_at(
            deadline + Duration::from_secs(1),
            DeliveryResult::Response { status: 200 },
        );
        let started = tokio::time::Instant::now();
        assert_eq!(
            within_deadline(pin!(received(rx)), deadline).await,
            DeliveryResult::Timeout
        );
        assert_eq!(started.elapsed(), deadline + LAST_CHANCE);
        let never = std::future::pending::<DeliveryResult>();
        assert_eq!(
            within_deadline(pin!(never), deadline).await,
            DeliveryResult::Timeout
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_before_the_deadline_is_returned_at_once() {
        let rx = answer_at(
            Duration::from_secs(1),
            DeliveryResult::Response { status: 500 },
        );
        let started = tokio::time::Instant::now();
        assert_eq!(
            within_deadline(pin!(received(rx)), Duration::from_secs(15)).await,
            DeliveryResult::Response { status: 500 }
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    fn location(value: &'static str) -> HeaderValue {
        HeaderValue::from_static(value)
    }

    #[test]
    fn redirect_rules_follow_curl_for_a_post() {
        let loc = location("/next");
        for (code, expected) in [
            (301, HopMethod::PostEmpty),
            (302, HopMethod::PostEmpty),
            (303, HopMethod::PostEmpty),
            (307, HopMethod::PostPayload),
            (308, HopMethod::PostPayload),
        ] {
            let status = StatusCode::from_u16(code).expect("status");
            assert_eq!(
                next_step(status, Some(&loc), HopMethod::PostPayload),
                Next::Follow {
                    location: "/next".into(),
                    method: expected
                },
                "{code}"
            );
        }
        // A 307 after a 303 repeats the empty POST.
        assert_eq!(
            next_step(
                StatusCode::TEMPORARY_REDIRECT,
                Some(&loc),
                HopMethod::PostEmpty
            ),
            Next::Follow {
                location: "/next".into(),
                method: HopMethod::PostEmpty
            }
        );
    }

    #[test]
    fn other_statuses_and_missing_locations_are_final() {
        let loc = location("/next");
        for code in [200, 204, 300, 304, 305, 400, 500] {
            let status = StatusCode::from_u16(code).expect("status");
            assert_eq!(
                next_step(status, Some(&loc), HopMethod::PostPayload),
                Next::Final,
                "{code}"
            );
        }
        assert_eq!(
            next_step(StatusCode::FOUND, None, HopMethod::PostPayload),
            Next::Final
        );
        assert_eq!(
            next_step(
                StatusCode::FOUND,
                Some(&location("  ")),
                HopMethod::PostPayload
            ),
            Next::Final
        );
    }

    #[test]
    fn locations_are_encoded_like_curl_does() {
        assert_eq!(encode_location(b"  /plain?q=1  "), "/plain?q=1");
        assert_eq!(
            encode_location("/a b/\u{fc}\"x\"".as_bytes()),
            "/a%20b/%C3%BC%22x%22"
        );
        assert_eq!(encode_location(b"/\xff{}|"), "/%FF%7B%7D%7C");
        let raw = HeaderValue::from_bytes("/caf\u{e9}".as_bytes()).expect("8-bit value");
        assert_eq!(
            next_step(StatusCode::FOUND, Some(&raw), HopMethod::PostPayload),
            Next::Follow {
                location: "/caf%C3%A9".into(),
                method: HopMethod::PostEmpty
            }
        );
    }
}
