//! `listen`: a local receiver for trying hooks. It prints each delivery's
//! request line, headers and body as received, checks the signature when a
//! key is given (either of Phorge's header names), and answers with the
//! chosen status after the chosen delay.
//!
//! One connection per request (no keep-alive), so `--count` can stop after
//! the last answer has gone out, and each delivery prints as one block.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use webhook_core::verify;

use crate::clock;
use crate::error::{exit, AdminError};
use crate::out::{emit, emit_line};

/// The header names Phorge has used for the signature, old and new.
pub const SIGNATURE_HEADERS: [&str; 2] = [
    "X-Phabricator-Webhook-Signature",
    "X-Phorge-Webhook-Signature",
];

/// How long `--count` waits for the last answers to be written.
const DRAIN_BOUND: Duration = Duration::from_secs(10);

/// What `listen` was asked to do.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// Where to bind.
    pub addr: SocketAddr,
    /// The HMAC key to check signatures with.
    pub key: Option<String>,
    /// The status to answer with.
    pub status: StatusCode,
    /// The wait before answering.
    pub delay: Duration,
    /// Stop after this many deliveries.
    pub count: Option<u64>,
}

/// The signature check's verdict for one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureCheck {
    /// No key given.
    NotChecked,
    /// Every signature header present matches.
    Verified(Vec<String>),
    /// A header is present but does not match.
    Mismatch(Vec<String>),
    /// Neither header is present.
    Missing,
}

impl SignatureCheck {
    /// Judges `headers` (name, value) against `body` under `key`.
    pub fn judge(key: Option<&str>, headers: &[(String, String)], body: &[u8]) -> Self {
        let Some(key) = key else {
            return Self::NotChecked;
        };
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for name in SIGNATURE_HEADERS {
            for (_, value) in headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
                if verify(key.as_bytes(), body, value) {
                    good.push(name.to_owned());
                } else {
                    bad.push(name.to_owned());
                }
            }
        }
        match (good.is_empty(), bad.is_empty()) {
            (_, false) => Self::Mismatch(bad),
            (false, true) => Self::Verified(good),
            (true, true) => Self::Missing,
        }
    }

    /// Whether this counts as a failed check.
    pub fn failed(&self) -> bool {
        matches!(self, Self::Mismatch(_) | Self::Missing)
    }

    /// The line printed after the body.
    pub fn line(&self) -> String {
        match self {
            Self::NotChecked => "signature: not checked (no key given)".to_owned(),
            Self::Verified(names) => format!("signature: verified ({})", names.join(", ")),
            Self::Mismatch(names) => format!(
                "signature: FAILED ({} does not match the body under --key)",
                names.join(", ")
            ),
            Self::Missing => format!(
                "signature: FAILED (no {} or {} header)",
                SIGNATURE_HEADERS[0], SIGNATURE_HEADERS[1]
            ),
        }
    }
}

/// Shared between connections.
#[derive(Debug, Default)]
struct Tally {
    seen: AtomicU64,
    failed: AtomicU64,
    answered: AtomicU64,
    reached: Notify,
}

/// Runs until Ctrl-C, or until `count` deliveries were answered.
pub async fn run(options: ListenOptions) -> Result<u8, AdminError> {
    let listener = TcpListener::bind(options.addr)
        .await
        .map_err(|source| AdminError::Listen {
            addr: options.addr,
            source,
        })?;
    let local = listener.local_addr().map_err(|source| AdminError::Listen {
        addr: options.addr,
        source,
    })?;
    emit_line(format!(
        "listening on http://{local}/ (any path); answering {} after {} ms; signatures {}",
        options.status.as_u16(),
        options.delay.as_millis(),
        if options.key.is_some() {
            "checked against the key"
        } else {
            "not checked (no key given)"
        }
    ))?;
    if !local.ip().is_loopback() {
        eprintln!("warning: {local} is reachable from other hosts");
    }
    let tally = Arc::new(Tally::default());
    let options = Arc::new(options);
    let mut connections = JoinSet::new();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let (tally, options) = (Arc::clone(&tally), Arc::clone(&options));
                connections.spawn(async move {
                    let service = service_fn(move |request| {
                        let (tally, options) = (Arc::clone(&tally), Arc::clone(&options));
                        async move {
                            Ok::<_, Infallible>(answer(request, peer, &tally, &options).await)
                        }
                    });
                    // A broken client connection concerns only that client.
                    let _ = http1::Builder::new()
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            () = tally.reached.notified() => break,
            _ = &mut interrupted => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Let the last answers go out before exiting.
    let _ = tokio::time::timeout(DRAIN_BOUND + options.delay, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    let (seen, failed) = (
        tally.seen.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    );
    let plural = if seen == 1 { "delivery" } else { "deliveries" };
    emit_line(format!(
        "stopped after {seen} {plural}; {failed} failed the signature check"
    ))?;
    Ok(if failed > 0 {
        exit::CHECK_FAILED
    } else {
        exit::OK
    })
}

async fn answer(
    request: Request<Incoming>,
    peer: SocketAddr,
    tally: &Tally,
    options: &ListenOptions,
) -> Response<Full<Bytes>> {
    let n = tally.seen.fetch_add(1, Ordering::Relaxed) + 1;
    let line = format!(
        "{} {} {:?}",
        request.method(),
        request.uri(),
        request.version()
    );
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (body, unreadable) = match request.into_body().collect().await {
        Ok(collected) => (collected.to_bytes(), None),
        Err(err) => (Bytes::new(), Some(err.to_string())),
    };
    let check = SignatureCheck::judge(options.key.as_deref(), &headers, &body);
    if check.failed() {
        tally.failed.fetch_add(1, Ordering::Relaxed);
    }
    let mut block = format!(
        "--- delivery {n} from {peer} at {}\n{line}\n",
        clock::utc(clock::now())
    );
    for (name, value) in &headers {
        block.push_str(&format!("{name}: {value}\n"));
    }
    if let Some(err) = unreadable {
        block.push_str(&format!("\n(body unreadable: {err})\n"));
    }
    block.push_str(&format!("\n({} bytes)\n", body.len()));
    block.push_str(&String::from_utf8_lossy(&body));
    if !body.ends_with(b"\n") {
        block.push_str("\n(no trailing newline)\n");
    }
    block.push_str(&check.line());
    block.push('\n');
    block.push_str(&format!(
        "answering {} after {} ms\n",
        options.status.as_u16(),
        options.delay.as_millis()
    ));
    // Output is best effort: a closed stdout must not stop answering.
    let _ = emit(&block);
    if !options.delay.is_zero() {
        tokio::time::sleep(options.delay).await;
    }
    let answered = tally.answered.fetch_add(1, Ordering::Relaxed) + 1;
    if options.count.is_some_and(|count| answered >= count) {
        // `notify_one` keeps the permit if the accept loop is busy.
        tally.reached.notify_one();
    }
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = options.status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::sign;

    const KEY: &str = "abcdefghijklmnopqrstuvwxyz234567";

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn either_header_name_is_checked() {
        let body = b"{}\n";
        let good = sign(KEY.as_bytes(), body);
        for name in [
            "x-phabricator-webhook-signature",
            "x-phorge-webhook-signature",
        ] {
            let check = SignatureCheck::judge(Some(KEY), &headers(&[(name, &good)]), body);
            assert!(matches!(check, SignatureCheck::Verified(_)), "{name}");
            assert!(!check.failed());
        }
    }

    #[test]
    fn a_wrong_or_missing_signature_fails() {
        let body = b"{}\n";
        let wrong = sign(b"another key", body);
        let check = SignatureCheck::judge(
            Some(KEY),
            &headers(&[("x-phabricator-webhook-signature", &wrong)]),
            body,
        );
        assert_eq!(
            check,
            SignatureCheck::Mismatch(vec!["X-Phabricator-Webhook-Signature".into()])
        );
        assert!(check.line().contains("FAILED"));
        let none = SignatureCheck::judge(Some(KEY), &headers(&[("content-type", "x")]), body);
        assert_eq!(none, SignatureCheck::Missing);
        assert!(none.failed());
        // One good and one bad header is still a failure.
        let good = sign(KEY.as_bytes(), body);
        let mixed = SignatureCheck::judge(
            Some(KEY),
            &headers(&[
                ("x-phabricator-webhook-signature", &good),
                ("x-phorge-webhook-signature", &wrong),
            ]),
            body,
        );
        assert!(mixed.failed());
    }

    #[test]
    fn without_a_key_nothing_is_checked() {
        let check = SignatureCheck::judge(None, &headers(&[]), b"x");
        assert_eq!(check, SignatureCheck::NotChecked);
        assert!(!check.failed());
    }
}
