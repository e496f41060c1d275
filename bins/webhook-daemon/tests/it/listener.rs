//! The diagnostics listener under connection floods (issue 17 item 5):
//! half-open connections beyond the cap, under a descriptor limit lower
//! than the flood, must not keep `/healthz` from answering, and a client
//! that sends a request head slowly, or nothing at all, is closed after the
//! header-read timeout (5 s).
//!
//! The daemon gets a database address where nothing listens: `/healthz`
//! needs none.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::daemon::{database_env, free_port, http, Daemon};

/// The daemon's header-read and idle timeout (`server::IDLE_TIMEOUT`).
const IDLE: Duration = Duration::from_secs(5);

fn env_without_database() -> Vec<(String, String)> {
    let mut env = database_env("gorge_listener_nodb");
    env.retain(|(k, _)| k != "GORGE_WEBHOOK_MYSQL_PORT");
    env.push(("GORGE_WEBHOOK_MYSQL_PORT".into(), free_port().to_string()));
    env
}

async fn healthz_within(daemon: &Daemon, bound: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    match tokio::time::timeout(bound, http(daemon.addr(), "GET", "/healthz", &[], b"")).await {
        Ok(Ok(response)) if response.status == 200 => Ok(started.elapsed()),
        Ok(Ok(response)) => Err(format!("status {}", response.status)),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {bound:?}")),
    }
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_through_a_flood_of_half_open_connections() {
    // 320 descriptors for the daemon, 400 connections at it: without a
    // cap, accept runs out of descriptors and `/healthz` waits in the
    // listen backlog for as long as the flood holds on.
    const LIMIT: u32 = 320;
    let mut daemon = Daemon::spawn_limited("flood", &[], &env_without_database(), Some(LIMIT));
    daemon.wait_healthy().await;
    let mut flood = Vec::new();
    for i in 0..400 {
        let mut stream = TcpStream::connect(daemon.addr())
            .await
            .expect("connect to the diagnostics port");
        if i % 2 == 1 {
            // Half of them start a request line and stop.
            stream.write_all(b"GET /heal").await.expect("partial line");
        }
        flood.push(stream);
    }
    for round in 0..5 {
        let took = healthz_within(&daemon, Duration::from_secs(3))
            .await
            .unwrap_or_else(|why| {
                panic!(
                    "round {round}: /healthz during the flood: {why}\n{}",
                    daemon.log()
                )
            });
        assert!(took < Duration::from_secs(3), "round {round}: {took:?}");
        eprintln!(
            "listener: /healthz round {round} answered in {took:?} with {} flood connections",
            flood.len()
        );
        // More of the flood arrives between checks.
        for _ in 0..50 {
            if let Ok(stream) = TcpStream::connect(daemon.addr()).await {
                flood.push(stream);
            }
        }
    }
    let open = open_descriptors(daemon.pid());
    eprintln!("listener: {open} descriptors open in the daemon (limit {LIMIT})");
    assert!(
        open > 0 && open < LIMIT as usize,
        "{open} descriptors open in the daemon"
    );
    assert!(daemon.is_running(), "{}", daemon.log());
    assert!(!daemon.stderr().contains("panicked"), "{}", daemon.log());
}

/// Waits until the server closes `stream` (EOF or reset); returns how long
/// that took, or `None` when it has not within `bound`.
async fn closed_within(
    stream: &mut TcpStream,
    started: Instant,
    bound: Duration,
) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    let remaining = bound.saturating_sub(started.elapsed());
    tokio::time::timeout(remaining, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_are_closed_after_the_header_read_timeout() {
    let daemon = Daemon::start("slowloris", &env_without_database()).await;
    let bound = IDLE * 3;

    // Sends nothing at all (never gets past telling HTTP/1 from HTTP/2).
    let silent_started = Instant::now();
    let mut silent = TcpStream::connect(daemon.addr()).await.expect("connect");
    // A request line and then one header line a second: each byte comes
    // in time, the head never completes.
    let trickle_started = Instant::now();
    let mut trickle = TcpStream::connect(daemon.addr()).await.expect("connect");
    trickle
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("request line");
    let trickler = tokio::spawn(async move {
        for i in 0..30 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if trickle
                .write_all(format!("X-Slow-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
        closed_within(&mut trickle, trickle_started, bound).await
    });
    // One whole request on a kept-alive connection, then nothing.
    let mut kept = TcpStream::connect(daemon.addr()).await.expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut head = [0u8; 12];
    kept.read_exact(&mut head).await.expect("response");
    assert_eq!(&head, b"HTTP/1.1 200");
    let kept_started = Instant::now();

    let silent_took = closed_within(&mut silent, silent_started, bound).await;
    let kept_took = closed_within(&mut kept, kept_started, bound).await;
    let trickle_took = trickler.await.expect("trickler");
    for (what, took, most) in [
        ("silent", silent_took, IDLE * 2),
        ("trickling head", trickle_took, IDLE * 2),
        ("idle keep-alive", kept_took, IDLE * 3),
    ] {
        let took = took.unwrap_or_else(|| panic!("{what}: still open after {bound:?}"));
        eprintln!("listener: {what} client closed after {took:?}");
        assert!(
            took >= IDLE - Duration::from_millis(500) && took <= most,
            "{what}: closed after {took:?}, expected {IDLE:?}..{most:?}"
        );
    }
    // And the listener still answers.
    healthz_within(&daemon, Duration::from_secs(3))
        .await
        .expect("/healthz after the slow clients");
}
