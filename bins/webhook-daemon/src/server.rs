//! The diagnostics listener: accepts connections, hands each request to
//! [`Api`], and drains open connections on shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE};
use http::{Method, Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::api::{Api, Reply};

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

async fn answer(api: &Api, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let head = request.method() == Method::HEAD;
    let uri = request.uri();
    let reply = api
        .handle(request.method(), uri.path(), uri.query(), request.headers())
        .await;
    to_response(reply, head)
}

fn to_response(reply: Reply, head: bool) -> Response<Full<Bytes>> {
    let body = if head { Bytes::new() } else { reply.body };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = reply.status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static(reply.content_type),
    );
    if let Some(allow) = reply.allow {
        response
            .headers_mut()
            .insert(ALLOW, http::HeaderValue::from_static(allow));
    }
    response
}
