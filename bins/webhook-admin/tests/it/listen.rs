//! `listen` as a process: it binds loopback, prints what it receives,
//! checks either signature header against `--key`, answers with the chosen
//! status, and with `--count` stops by itself (exit 1 if a check failed).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout};
use webhook_core::sign;

use crate::support::{command, env, KEY};

const DEADLINE: Duration = Duration::from_secs(60);
const BODY: &str = "{\n  \"object\": {\n    \"type\": \"TASK\"\n  }\n}\n";

/// Starts `listen` with `args` and returns it with the port it bound.
async fn start(args: &[&str]) -> (Child, BufReader<ChildStdout>, u16) {
    let mut child = command(&env(&[]))
        .arg("listen")
        .args(["--addr", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn listen");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout piped"));
    let mut first = String::new();
    tokio::time::timeout(DEADLINE, stdout.read_line(&mut first))
        .await
        .expect("listen printed its address")
        .expect("read stdout");
    let rest = first
        .strip_prefix("listening on http://127.0.0.1:")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    let port = rest
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first:?}"));
    (child, stdout, port)
}

/// One raw HTTP/1.1 POST; returns the whole response text.
async fn post(port: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to listen");
    let mut request = format!(
        "POST /hook?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut response = String::new();
    tokio::time::timeout(DEADLINE, stream.read_to_string(&mut response))
        .await
        .expect("an answer")
        .expect("read answer");
    response
}

/// Waits for the process to end; returns its exit status and the rest of
/// its stdout.
async fn finish(mut child: Child, mut stdout: BufReader<ChildStdout>) -> (i32, String) {
    let mut rest = String::new();
    tokio::time::timeout(DEADLINE, stdout.read_to_string(&mut rest))
        .await
        .expect("stdout closed")
        .expect("read stdout");
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("listen stopped after --count")
        .expect("wait");
    (status.code().unwrap_or(-1), rest)
}

#[tokio::test]
async fn deliveries_are_printed_and_signatures_checked() {
    let (child, stdout, port) = start(&["--key", KEY, "--status", "202", "--count", "2"]).await;
    let good = sign(KEY.as_bytes(), BODY.as_bytes());
    let first = post(port, &[("X-Phabricator-Webhook-Signature", &good)], BODY).await;
    assert!(first.starts_with("HTTP/1.1 202"), "{first}");
    let wrong = sign(b"not the key", BODY.as_bytes());
    let second = post(port, &[("X-Phorge-Webhook-Signature", &wrong)], BODY).await;
    assert!(second.starts_with("HTTP/1.1 202"), "{second}");

    let (status, printed) = finish(child, stdout).await;
    assert_eq!(status, 1, "one delivery failed its check:\n{printed}");
    assert!(
        printed.contains("--- delivery 1 from 127.0.0.1:"),
        "{printed}"
    );
    assert!(printed.contains("POST /hook?x=1 HTTP/1.1\n"), "{printed}");
    assert!(
        printed.contains("content-type: application/json\n"),
        "{printed}"
    );
    assert!(printed.contains(&format!("x-phabricator-webhook-signature: {good}\n")));
    assert!(
        printed.contains(&format!("({} bytes)\n{BODY}", BODY.len())),
        "{printed}"
    );
    assert!(
        printed.contains("signature: verified (X-Phabricator-Webhook-Signature)"),
        "{printed}"
    );
    assert!(
        printed.contains(
            "signature: FAILED (X-Phorge-Webhook-Signature does not match the body under --key)"
        ),
        "{printed}"
    );
    assert!(printed.contains("answering 202 after 0 ms"), "{printed}");
    assert!(printed.contains("stopped after 2 deliveries; 1 failed the signature check"));
}

#[tokio::test]
async fn the_new_header_name_verifies_and_all_good_exits_0() {
    let (child, stdout, port) = start(&["--key", KEY, "--count", "1"]).await;
    let good = sign(KEY.as_bytes(), BODY.as_bytes());
    let answer = post(port, &[("X-Phorge-Webhook-Signature", &good)], BODY).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, printed) = finish(child, stdout).await;
    assert_eq!(status, 0, "{printed}");
    assert!(printed.contains("signature: verified (X-Phorge-Webhook-Signature)"));
}

#[tokio::test]
async fn a_missing_signature_fails_the_check() {
    let (child, stdout, port) = start(&["--key", KEY, "--count", "1"]).await;
    let answer = post(port, &[], BODY).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (status, printed) = finish(child, stdout).await;
    assert_eq!(status, 1, "{printed}");
    assert!(printed.contains("signature: FAILED (no X-Phabricator-Webhook-Signature"));
}

#[tokio::test]
async fn without_a_key_it_answers_the_chosen_status_after_the_delay() {
    let (child, stdout, port) =
        start(&["--status", "503", "--delay-ms", "50", "--count", "1"]).await;
    let answer = post(port, &[], "no newline").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let (status, printed) = finish(child, stdout).await;
    assert_eq!(status, 0, "{printed}");
    assert!(
        printed.contains("signature: not checked (no key given)"),
        "{printed}"
    );
    assert!(
        printed.contains("no newline\n(no trailing newline)\n"),
        "{printed}"
    );
    assert!(printed.contains("answering 503 after 50 ms"), "{printed}");
}

#[tokio::test]
async fn bad_listen_arguments_are_usage_errors() {
    let out = crate::support::run(&env(&[]), &["listen", "--status", "42"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    let out = crate::support::run(&env(&[]), &["listen", "--addr", "not-an-address"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    // An address that cannot be bound here (TEST-NET-1 is not local).
    let out = crate::support::run(&env(&[]), &["listen", "--addr", "192.0.2.1:9"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    assert!(
        out.stderr.contains("cannot listen on 192.0.2.1:9"),
        "{}",
        out.stderr
    );
}
