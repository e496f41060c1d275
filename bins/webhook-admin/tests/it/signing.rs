//! `sign` and `verify` over stdin: the signature is core's, and the exit
//! status tells the verdict.

use webhook_core::sign;

use crate::support::{env, run, run_with_stdin, KEY};

const BODY: &[u8] = b"{\n  \"object\": {}\n}\n";

#[tokio::test]
async fn sign_prints_the_hex_hmac_of_stdin() {
    let out = run_with_stdin(&env(&[]), &["sign", "--key", KEY], BODY).await;
    assert_eq!(out.status, 0, "{out:?}");
    assert_eq!(out.stdout, format!("{}\n", sign(KEY.as_bytes(), BODY)));
    // Every byte counts, the trailing newline too.
    let trimmed = run_with_stdin(&env(&[]), &["sign", "--key", KEY], &BODY[..BODY.len() - 1]).await;
    assert_ne!(trimmed.stdout, out.stdout);
}

/// The key from a file or the environment signs as `--key` does, so it
/// need not stand in the process list; with none, a usage error.
#[tokio::test]
async fn the_key_comes_from_a_file_or_the_environment_too() {
    let expected = format!("{}\n", sign(KEY.as_bytes(), BODY));
    let file = std::env::temp_dir().join(format!("webhook-admin-key-{}", std::process::id()));
    std::fs::write(&file, format!("{KEY}\n")).expect("write the key file");
    let path = file.display().to_string();
    let from_file = run_with_stdin(&env(&[]), &["sign", "--key-file", &path], BODY).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(from_file.status, 0, "{from_file:?}");
    assert_eq!(from_file.stdout, expected);
    let from_env = run_with_stdin(&env(&[("WEBHOOK_HMAC_KEY", KEY)]), &["sign"], BODY).await;
    assert_eq!(from_env.status, 0, "{from_env:?}");
    assert_eq!(from_env.stdout, expected);
    let none = run_with_stdin(&env(&[]), &["sign"], BODY).await;
    assert_eq!(none.status, 2, "{none:?}");
    assert!(none.stderr.contains("--key-file"), "{}", none.stderr);
}

#[tokio::test]
async fn verify_exits_0_on_a_match_and_1_otherwise() {
    let good = sign(KEY.as_bytes(), BODY);
    let ok = run_with_stdin(
        &env(&[]),
        &["verify", "--key", KEY, "--signature", &good],
        BODY,
    )
    .await;
    assert_eq!(ok.status, 0, "{ok:?}");
    assert!(ok.stdout.contains("signature matches"));
    let upper = good.to_uppercase();
    let ok = run_with_stdin(
        &env(&[]),
        &["verify", "--key", KEY, "--signature", &upper],
        BODY,
    )
    .await;
    assert_eq!(ok.status, 0, "hex case is ignored");

    let other_key = run_with_stdin(
        &env(&[]),
        &[
            "verify",
            "--key",
            "bbcdefghijklmnopqrstuvwxyz234567",
            "--signature",
            &good,
        ],
        BODY,
    )
    .await;
    assert_eq!(other_key.status, 1, "{other_key:?}");
    assert!(other_key.stdout.contains("does NOT match"));
    let other_body = run_with_stdin(
        &env(&[]),
        &["verify", "--key", KEY, "--signature", &good],
        b"{}\n",
    )
    .await;
    assert_eq!(other_body.status, 1);
    let garbage = run_with_stdin(
        &env(&[]),
        &["verify", "--key", KEY, "--signature", "zz"],
        BODY,
    )
    .await;
    assert_eq!(garbage.status, 1);
}

#[tokio::test]
async fn a_missing_argument_is_a_usage_error() {
    let out = run(&env(&[]), &["sign"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    assert!(out.stderr.contains("--key"), "{}", out.stderr);
    let out = run(&env(&[]), &["verify", "--key", KEY]).await;
    assert_eq!(out.status, 2);
    assert!(out.stderr.contains("--signature"), "{}", out.stderr);
}
