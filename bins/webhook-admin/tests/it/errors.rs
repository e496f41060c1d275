//! Exit statuses and messages: not found (1), usage and bad settings (2,
//! naming the variable), an unreachable or missing database (3).

use webhook_test_support::with_db;

use crate::support::{db_env, env, on_db, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_request_is_exit_1_with_a_clear_message() {
    with_db(|db| async move {
        for command in ["explain", "payload"] {
            let out = on_db(&db, &[command, "999999"]).await;
            assert_eq!(out.status, 1, "{out:?}");
            assert_eq!(out.stdout, "");
            assert_eq!(
                out.stderr,
                format!(
                    "webhook-admin: no request with id 999999 in {}\n",
                    db.database
                )
            );
            let out = on_db(&db, &[command, "PHID-HWBR-nosuchrequestaaaaaa"]).await;
            assert_eq!(out.status, 1, "{out:?}");
            assert!(
                out.stderr
                    .contains("no request with PHID PHID-HWBR-nosuchrequestaaaaaa"),
                "{}",
                out.stderr
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_request_reference_is_a_usage_error() {
    with_db(|db| async move {
        let out = on_db(&db, &["explain", "request-7"]).await;
        assert_eq!(out.status, 2, "{out:?}");
        assert!(
            out.stderr.contains("neither a request id"),
            "{}",
            out.stderr
        );
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_database_is_exit_3() {
    let vars = env(&[
        ("GORGE_WEBHOOK_MYSQL_PORT", "1"),
        ("GORGE_WEBHOOK_MYSQL_USER", "root"),
    ]);
    for args in [
        &["stats"][..],
        &["stats", "--json"],
        &["hooks"],
        &["explain", "1"],
        &["payload", "1"],
    ] {
        let out = run(&vars, args).await;
        assert_eq!(out.status, 3, "{args:?}: {out:?}");
        assert_eq!(out.stdout, "", "{args:?}");
        assert!(
            out.stderr
                .starts_with("webhook-admin: database phorge_herald at 127.0.0.1:1: "),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("database unavailable"),
            "{}",
            out.stderr
        );
    }
}

#[tokio::test]
async fn a_database_phorge_has_not_created_is_exit_3() {
    let vars = env(&[
        ("GORGE_WEBHOOK_NAMESPACE", "wh_admin_never_created"),
        ("GORGE_WEBHOOK_MYSQL_USER", "root"),
    ]);
    let out = run(&vars, &["stats"]).await;
    assert_eq!(out.status, 3, "{out:?}");
    assert!(
        out.stderr
            .contains("database wh_admin_never_created_herald does not exist yet"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_setting_is_exit_2_naming_the_variable() {
    with_db(|db| async move {
        for (variable, value) in [
            ("GORGE_WEBHOOK_CLAIM_LEASE_SEC", "0"),
            ("GORGE_WEBHOOK_RETRY_BACKOFF_SEC", "soon"),
            ("GORGE_WEBHOOK_MYSQL_PORT", "abc"),
            ("GORGE_WEBHOOK_MAX_CONCURRENT", "0"),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "10.0.0.0/99"),
        ] {
            let vars = db_env(&db, &[(variable, value)]);
            for args in [
                &["config"][..],
                &["stats"],
                &["hooks"],
                &["explain", "1"],
                &["payload", "1"],
            ] {
                let out = run(&vars, args).await;
                assert_eq!(out.status, 2, "{variable}={value} {args:?}: {out:?}");
                assert!(
                    out.stderr
                        .starts_with(&format!("webhook-admin: {variable}: ")),
                    "{variable}={value} {args:?}: {}",
                    out.stderr
                );
                assert_eq!(out.stdout, "");
            }
        }
    })
    .await;
}

#[tokio::test]
async fn usage_errors_are_exit_2_and_help_is_exit_0() {
    let out = run(&env(&[]), &["frobnicate"]).await;
    assert_eq!(out.status, 2, "{out:?}");
    let out = run(&env(&[]), &[]).await;
    assert_eq!(out.status, 2, "{out:?}");
    for command in [
        "config", "stats", "hooks", "explain", "payload", "sign", "verify", "listen",
    ] {
        let out = run(&env(&[]), &[command, "--help"]).await;
        assert_eq!(out.status, 0, "{command}: {out:?}");
        assert!(
            out.stdout.contains("Exit status:"),
            "{command}: {}",
            out.stdout
        );
        assert!(out.stdout.contains("3  database unreachable"), "{command}");
        // `help <command>` says the same as `<command> --help`.
        let help = run(&env(&[]), &["help", command]).await;
        assert_eq!(help.status, 0, "help {command}: {help:?}");
        assert_eq!(help.stdout, out.stdout, "help {command}");
    }
}
