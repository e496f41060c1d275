//! The `webhook_core::Transport` on hyper + rustls: the only crate that
//! speaks HTTP to receivers.
//!
//! - **Client.** hyper 1.x through hyper-util's pooled client; rustls with
//!   the ring provider and compiled-in webpki roots (plus configured extra
//!   roots); HTTP/1.1, or HTTP/2 when ALPN picks it; keep-alive connections
//!   per host, dropped after an idle timeout. No OpenSSL, no aws-lc.
//! - **Request.** `POST`, the payload bytes unchanged,
//!   `Content-Type: application/json`, every configured signature header,
//!   `User-Agent`, `Accept: */*`, `Accept-Encoding: gzip` (as Phorge's cURL
//!   asks; the response body is only read to be discarded, or its first
//!   bytes kept as received for the attempt history, so nothing is ever
//!   decoded), optionally a request-id header. The request body is
//!   not compressed. On HTTP/1.1 header names are written in Title-Case
//!   (`Content-Type`, `X-Phabricator-Webhook-Signature`), as cURL writes
//!   PHP's; HTTP/2 names are lower-case by protocol.
//! - **Credentials in the URI** (`https://user:pass@host/`) go out as
//!   `Authorization: Basic`, decoded as cURL decodes them, on the first
//!   request and on redirect hops to the same origin only (rules in
//!   `auth`). User-info never reaches the connection pool, a log line, an
//!   error or a result.
//! - **Outbound check.** [`Transport::resolve`](webhook_core::Transport::resolve)
//!   refuses URIs that are not `http`/`https` with a host, names that do not
//!   exist, and names with any address in the deny list (unless the allow
//!   list covers it). Connections are made only to addresses checked when
//!   the connection is set up, on every hop: IP literals are checked
//!   directly and names go through a resolver that yields only checked
//!   addresses. A refused hop ends the delivery with
//!   [`DeliveryResult::Refused`](webhook_core::DeliveryResult::Refused).
//! - **Egress proxy** ([`proxy`]), read as cURL and Go read it: `https`
//!   hops go through a `CONNECT` tunnel to an address the outbound check
//!   passed (TLS inside it for the hook's host name), `http` hops to the
//!   proxy in absolute form once their host was checked; the proxy's own
//!   address is not held to the deny list.
//! - **Deadline.** `OutboundRequest::timeout` bounds the whole exchange,
//!   redirects and the bounded body read included.
//! - **Attempt history.** `deliver_recording` is the same exchange, noting
//!   as it goes each response's URI (without user-info) and status, the
//!   first request's headers (`Authorization` and `Proxy-Authorization`
//!   withheld), and the last response's head and first body bytes (read
//!   within the same body limit); what was noted before the deadline
//!   stays. `deliver` notes nothing.
//! - **Redirects**, as PHP's cURL follows them: 301/302/303 become a POST
//!   with an empty body and the same headers (on HTTP/1.1 without a
//!   `Content-Length`, as cURL sends it; HTTP/2 states `content-length:
//!   0`), 307/308
//!   repeat the POST with its body, up to `max_redirects`; a relative `Location` is resolved against the URI
//!   that answered. `max_redirects = 0` means "never follow": the 3xx is the
//!   final status (cURL with `CURLOPT_MAXREDIRS = 0` would report error 47).
//! - **Stale pooled connections.** As cURL does, a request that dies without
//!   a byte of answer on an HTTP/1 connection reused from the pool is sent
//!   once more (the receiver closed the idle connection as it went out).
//!   A fresh connection is never retried.
//!
//! How an exchange ends, as implemented (cURL numbers in brackets):
//!
//! | what happened | result |
//! |---|---|
//! | a final response (after redirects), body read up to the limit | `Response { status }` |
//! | the same, a 429 or 503 whose `Retry-After` is delay-seconds or an HTTP date in the future | `Throttled { status, retry_after }`: written back like `Response`, and the dispatcher pauses the hook (the header on any other status, a past date or anything else: `Response`) |
//! | the delivery deadline passed, at any stage | `Timeout` (28) |
//! | connection setup (lookup + TCP + TLS) exceeded the connect timeout, or TCP connect timed out | `Timeout` (28), as cURL reports its connect timeout |
//! | a hop's URI is not http(s) with a host, its host does not exist, or has a denied address | `Refused(..)` (a permanent hook error `uri`) |
//! | the resolver failed temporarily while connecting | `Failed(Resolve)` (6) |
//! | TCP connect refused / unreachable | `Failed(Connect)` (7) |
//! | creating or connecting the socket failed for want of descriptors (EMFILE, ENFILE) or memory (ENOMEM, ENOBUFS) | `Local(Descriptors / Memory)`: this host's failure, nothing written (cURL would say 7) |
//! | the egress proxy failed: its name unresolvable, unreachable, silent to `CONNECT`, TLS to it failed, 407 (or 401) to `CONNECT` or 407 to a forwarded request, another refusal or failure of `CONNECT`, a non-HTTP answer | `Local(Proxy(..))`: this side's failure, nothing written, the breaker untouched |
//! | the response is not HTTP | `Failed(Protocol)` (8) |
//! | TLS handshake or certificate failure, or the peer hung up mid-handshake | `Failed(Tls)` (35) |
//! | more redirects than `max_redirects` | `Failed(TooManyRedirects)` (47) |
//! | the connection closed before a complete response head | `Failed(EmptyReply)` (52) |
//! | writing the request failed, or the connection broke while a write was waiting | `Failed(Send)` (55) |
//! | reset or other failure while receiving, a truncated body | `Failed(Receive)` (56) |
//!
//! Known differences from PHP's cURL:
//!
//! - `Target::addrs` from `resolve` is informational: each new connection
//!   looks the name up again and checks every address again, so what is
//!   connected to is always what was checked, but it may differ from the
//!   addresses `resolve` reported.
//! - Names are resolved with `getaddrinfo`; a host name that is not ASCII
//!   (IDN) is refused as malformed rather than converted to punycode.
//! - `EAI_FAIL` and other resolver errors except "no such name" / "no
//!   data" are treated as temporary (`http`/6), never as an unknown host.

mod auth;
mod classify;
mod client_tls;
pub mod config;
mod connector;
mod lookup;
mod policy;
pub mod proxy;
mod retry_after;
mod transport;
mod tunnel;
mod uri;

pub use client_tls::BuildError;
pub use config::{
    parse_cidr_list, parse_list, CheckedTransportConfig, TransportConfig, DEFAULT_SIGNATURE_HEADER,
};
pub use lookup::{LookupError, NameLookup, SystemLookup};
pub use policy::{phorge_deny_list, OutboundPolicy, PHORGE_DENY_LIST};
pub use proxy::Proxies;
pub use transport::HyperTransport;
