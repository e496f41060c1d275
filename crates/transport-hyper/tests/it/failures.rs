//! Receivers that fail or stall: every transport failure of protocol §5's
//! table, and the deadline that bounds them all.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use webhook_core::{DeliveryResult, TransportFailure};
use webhook_transport_hyper::TransportConfig;

use crate::support::*;

#[tokio::test]
async fn a_receiver_that_never_answers_times_out() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
}

#[tokio::test]
async fn a_receiver_that_never_reads_times_out() {
    let server = raw_server(|socket| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
}

#[tokio::test]
async fn hanging_after_the_headers_times_out() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        write_all(
            &mut socket,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
        )
        .await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
}

#[tokio::test]
async fn a_slow_trickle_cannot_outlast_the_deadline() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        write_all(
            &mut socket,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n",
        )
        .await;
        for _ in 0..100_000 {
            write_all(&mut socket, b"x").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
}

#[tokio::test]
async fn a_slow_loris_head_cannot_outlast_the_deadline() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        write_all(&mut socket, b"HTTP/1.1 200 OK\r\n").await;
        for i in 0..100_000 {
            write_all(&mut socket, format!("X-Slow-{i}: y\r\n").as_bytes()).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), SHORT)).await;
    assert_eq!(result, DeliveryResult::Timeout);
}

#[tokio::test]
async fn a_closed_port_is_a_connect_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&format!("http://{addr}/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Connect));
}

#[tokio::test]
async fn a_stalled_connection_setup_is_a_timeout_at_the_connect_timeout() {
    // TCP connects, but the TLS handshake never gets an answer.
    let server = raw_server(|mut socket| async move {
        let mut buf = [0u8; 1024];
        let _ = socket.read(&mut buf).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
    })
    .await;
    let transport = transport(TransportConfig {
        connect_timeout: Duration::from_millis(200),
        ..local_config()
    });
    let url = format!("https://{}/", server.addr);
    // The delivery deadline is far away; only the connect timeout can end
    // this within the guard.
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        transport_deliver(&transport, outbound(&url, Duration::from_secs(60))),
    )
    .await
    .expect("the connect timeout ended the delivery");
    assert_eq!(result, DeliveryResult::Timeout);
}

async fn transport_deliver(
    transport: &webhook_transport_hyper::HyperTransport,
    request: webhook_core::OutboundRequest,
) -> DeliveryResult {
    use webhook_core::Transport;
    transport.deliver(request).await
}

#[tokio::test]
async fn a_reset_after_the_request_is_a_receive_failure() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        socket.set_zero_linger().expect("linger");
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Receive));
}

#[tokio::test]
async fn a_reset_while_sending_is_a_send_failure() {
    let server = raw_server(|mut socket| async move {
        let mut head = [0u8; 512];
        let _ = socket.read(&mut head).await;
        socket.set_zero_linger().expect("linger");
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let body = vec![b'x'; 32 * 1024 * 1024];
    let result = deliver(&transport, outbound_with(&server.url("/"), &body, GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Send));
}

#[tokio::test]
async fn closing_without_a_reply_is_an_empty_reply() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::EmptyReply));
    // A fresh connection is never retried: the receiver may have acted.
    assert_eq!(server.accepts(), 1);
}

/// A receiver whose first connection answers once, then takes the next
/// request and either hangs up (`partial` empty) or sends `partial` and
/// hangs up; later connections answer normally.
async fn closes_reused_connection(partial: &'static [u8]) -> (Server, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(AtomicUsize::new(0));
    let server = {
        let seen = Arc::clone(&seen);
        raw_server(move |mut socket| {
            let seen = Arc::clone(&seen);
            let first = connections.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                if !read_request(&mut socket).await.is_empty() {
                    seen.fetch_add(1, Ordering::SeqCst);
                    write_all(&mut socket, OK).await;
                }
                if first {
                    if !read_request(&mut socket).await.is_empty() {
                        seen.fetch_add(1, Ordering::SeqCst);
                        write_all(&mut socket, partial).await;
                    }
                    return;
                }
                while !read_request(&mut socket).await.is_empty() {
                    seen.fetch_add(1, Ordering::SeqCst);
                    write_all(&mut socket, OK).await;
                }
            }
        })
        .await
    };
    (server, seen)
}

#[tokio::test]
async fn a_pooled_connection_closed_by_the_receiver_is_retried_once() {
    let (server, seen) = closes_reused_connection(b"").await;
    let transport = transport(local_config());
    let first = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(first, DeliveryResult::Response { status: 200 });
    let second = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(second, DeliveryResult::Response { status: 200 });
    assert_eq!(server.accepts(), 2);
    // As with cURL, the request that went out on the dying connection is
    // sent again.
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_reused_connection_that_answered_something_is_not_retried() {
    let (server, seen) = closes_reused_connection(b"HTTP/1.1 20").await;
    let transport = transport(local_config());
    let first = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(first, DeliveryResult::Response { status: 200 });
    let second = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(second, DeliveryResult::Failed(TransportFailure::EmptyReply));
    assert_eq!(server.accepts(), 1);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

/// A response head of exactly `len` bytes.
fn head_of(len: usize) -> Vec<u8> {
    let start = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: ".to_vec();
    let pad = len - start.len() - 4;
    [start, vec![b'a'; pad], b"\r\n\r\n".to_vec()].concat()
}

#[tokio::test]
async fn a_response_head_longer_than_its_bound_is_a_protocol_failure() {
    // The head bound (GORGE_WEBHOOK_RESPONSE_HEAD_MAX) is also each
    // connection's read buffer; one byte over it fails the call, and a
    // head that fits is read however the bytes arrive. By default (0) the
    // buffer grows to about cURL's 100 KiB (hyper checks it per read).
    for (bound, len, expected) in [
        (4096, 4096, DeliveryResult::Response { status: 200 }),
        (
            4096,
            4097,
            DeliveryResult::Failed(TransportFailure::Protocol),
        ),
        (0, 60_000, DeliveryResult::Response { status: 200 }),
        (
            0,
            200_000,
            DeliveryResult::Failed(TransportFailure::Protocol),
        ),
    ] {
        let server = raw_server(move |mut socket| async move {
            read_request(&mut socket).await;
            write_all(&mut socket, &head_of(len)).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
        .await;
        let transport = transport(TransportConfig {
            response_head_max: bound,
            ..local_config()
        });
        let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
        assert_eq!(result, expected, "a {len}-byte head, bound {bound}");
    }
}

#[tokio::test]
async fn a_reply_that_is_not_http_is_a_protocol_failure() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        write_all(
            &mut socket,
            b"SSH-2.0-OpenSSH_9.6\r\nthis is not http\r\n\r\n",
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Protocol));
}

#[tokio::test]
async fn a_truncated_body_is_a_receive_failure() {
    let server = raw_server(|mut socket| async move {
        read_request(&mut socket).await;
        write_all(
            &mut socket,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten..",
        )
        .await;
        drop(socket);
    })
    .await;
    let transport = transport(local_config());
    let result = deliver(&transport, outbound(&server.url("/"), GUARD)).await;
    assert_eq!(result, DeliveryResult::Failed(TransportFailure::Receive));
}

/// Set in the child process of
/// [`running_out_of_descriptors_on_connect_is_a_local_failure`].
const DESCRIPTOR_CHILD: &str = "WEBHOOK_TEST_DESCRIPTOR_CHILD";

#[tokio::test]
async fn running_out_of_descriptors_on_connect_is_a_local_failure() {
    if std::env::var_os(DESCRIPTOR_CHILD).is_some() {
        return out_of_descriptors_in_this_process().await;
    }
    // The descriptor table is the process's: this test runs itself again
    // in a child (`ulimit -n 64`, the same test binary, only this test), so
    // the tests beside it keep their descriptors.
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new("sh")
        .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\""])
        .arg(exe)
        .args([
            "--exact",
            "failures::running_out_of_descriptors_on_connect_is_a_local_failure",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DESCRIPTOR_CHILD, "1")
        .output()
        .expect("run the test binary under ulimit -n 64");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

async fn out_of_descriptors_in_this_process() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let transport = transport(local_config());
    // Fill the descriptor table, so the connect's socket() gets EMFILE.
    let mut held = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(file) => held.push(file),
            Err(err) if err.raw_os_error() == Some(24) => break,
            Err(err) => panic!("open /dev/null: {err}"),
        }
        assert!(held.len() < 100_000, "the descriptor limit was not lowered");
    }
    let result = deliver(&transport, outbound(&format!("http://{addr}/"), GUARD)).await;
    drop(held);
    assert_eq!(
        result,
        DeliveryResult::Local(webhook_core::LocalFailure::Descriptors)
    );
    // With descriptors back, the same receiver is reached.
    let accepted = tokio::spawn(async move { listener.accept().await.is_ok() });
    let _ = deliver(&transport, outbound(&format!("http://{addr}/"), SHORT)).await;
    assert!(accepted.await.expect("accept task"), "connected afterwards");
}
