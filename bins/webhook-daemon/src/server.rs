//! The diagnostics listener: accepts connections, hands each request to
//! [`Api`], and drains open connections on shutdown. Whole replies and the
//! event stream share one boxed body type; the stream's body is polled only
//! as fast as the client reads, which is what makes a slow client lose
//! events instead of slowing anything down.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::api::{Answer, Api, Reply, EVENT_STREAM};
use crate::live::Subscription;

/// Every response's body: whole, or streamed.
type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How long open diagnostics connections may take to finish on shutdown.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `api` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, api: Arc<Api>, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let api = Arc::clone(&api);
                    let service = service_fn(move |request| {
                        let api = Arc::clone(&api);
                        async move { Ok::<_, Infallible>(answer(&api, request).await) }
                    });
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        if let Err(err) = connection.await {
                            debug!(event = "api_connection_error", error = %err);
                        }
                    });
                }
                Err(err) => {
                    // Usually descriptor exhaustion: back off instead of spinning.
                    warn!(event = "api_accept_failed", error = %err);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        debug!(event = "api_drain_timeout");
    }
}

async fn answer(api: &Api, request: Request<Incoming>) -> Response<Body> {
    let head = request.method() == Method::HEAD;
    let uri = request.uri();
    match api
        .answer(request.method(), uri.path(), uri.query(), request.headers())
        .await
    {
        Answer::Whole(reply) => to_response(reply, head),
        Answer::Events(subscription) => event_stream(subscription),
    }
}

/// `200 text/event-stream`, never cached, its body the subscription's
/// chunks until the hub closes or the client goes away.
fn event_stream(subscription: Subscription) -> Response<Body> {
    let frames = subscription
        .into_stream()
        .map(|chunk| Ok::<_, Infallible>(Frame::data(chunk)));
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Asks buffering reverse proxies (nginx) to pass events on at once.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn to_response(reply: Reply, head: bool) -> Response<Body> {
    let body = if head { Bytes::new() } else { reply.body };
    let mut response = Response::new(Full::new(body).boxed_unsync());
    *response.status_mut() = reply.status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static(reply.content_type),
    );
    if reply.content_type == EVENT_STREAM {
        // HEAD of the stream: the same head as GET's.
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if let Some(allow) = reply.allow {
        response
            .headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static(allow));
    }
    response
}
