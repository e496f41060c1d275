//! `doctor`: the hand-off checks against tables created from Phorge's
//! definitions and Phorge's `conf/local/local.json` — silent mode and
//! leftover PHP delivery tasks — and what it says when those cannot be
//! read; the account's privileges for delivery (an account that may only
//! read fails the check, naming what it lacks); this host's clock against
//! the server's, also with the tool's clock shifted an hour (libfaketime);
//! whether the server's binary log can be followed for new rows.

use mysql_async::prelude::Queryable;
use webhook_core::memory_store::NewRequest;
use webhook_core::{LastResult, RequestStatus};
use webhook_store_mysql::history::{HistoryConfig, MysqlHistory};
use webhook_store_mysql::{MysqlStore, OBJECT_TABLES};
use webhook_test_support::faketime::shifted_clock;
use webhook_test_support::mariadb::{
    as_root, drop_database, with_account, with_db_on, with_phorge_side,
};
use webhook_test_support::{with_db, BinlogServer, LocalJson, TestDb, Tinyproxy};

use crate::support::{db_env, on_db, run, Run};

/// `doctor` with `GORGE_PHORGE_LOCAL_CONFIG` naming `local`.
async fn doctor_with(db: &TestDb, local: &LocalJson, args: &[&str]) -> Run {
    let setting = local.setting();
    run(
        &db_env(db, &[("GORGE_PHORGE_LOCAL_CONFIG", &setting)]),
        args,
    )
    .await
}

/// The silent-mode check's words: verdict, name, finding, advice.
fn silent_mode_line(run: &Run) -> String {
    run.stdout
        .lines()
        .skip_while(|line| !line.contains("silent-mode"))
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_silent_mode_and_php_delivery() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |side| async move {
            let local = LocalJson::silent("false");
            let healthy = doctor_with(db, &local, &["doctor"]).await;
            assert_eq!(healthy.status, 0, "{}", healthy.all_output());
            assert!(
                healthy.stdout.contains("ok    silent-mode"),
                "{}",
                healthy.stdout
            );
            assert!(healthy.stdout.contains("ok    php-delivery"));
            assert!(
                healthy.stdout.contains("ok    php-runs      no archived"),
                "{}",
                healthy.stdout
            );
            side.archive_webhook_task_as("gorge-webhook:host:1:2:3")
                .await;
            side.archive_webhook_task_as("4242:1700000000:php-host:1")
                .await;
            let shared = doctor_with(db, &local, &["doctor"]).await;
            assert_eq!(shared.status, 0, "a warning: {}", shared.all_output());
            assert!(
                shared
                    .stdout
                    .contains("warn  php-runs      phd's taskmasters ran 1 of the last 2"),
                "{}",
                shared.stdout
            );

            side.set_silent(Some("true")).await;
            side.queue_php_task(true).await;
            let worried = doctor_with(db, &local, &["doctor", "--json"]).await;
            assert_eq!(worried.status, 1, "PHP delivering is a failed check");
            let checks = worried.json()["checks"].clone();
            let verdict = |name: &str| {
                checks
                    .as_array()
                    .and_then(|all| all.iter().find(|c| c["check"] == name))
                    .map(|c| c["verdict"].as_str().unwrap_or_default().to_owned())
            };
            assert_eq!(verdict("silent-mode").as_deref(), Some("warn"));
            assert_eq!(verdict("php-delivery").as_deref(), Some("fail"));
            assert_eq!(verdict("schema").as_deref(), Some("ok"));
            assert!(worried.stdout.contains("1 leased"), "{}", worried.stdout);
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reads_silent_mode_where_phorge_keeps_it() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |_side| async move {
            // `bin/config set phabricator.silent true`; the database entry
            // stays absent, as Phorge leaves it.
            let local = LocalJson::silent("true");
            let on = doctor_with(db, &local, &["doctor"]).await;
            assert_eq!(on.status, 0, "{}", on.all_output());
            let line = silent_mode_line(&on);
            assert!(
                line.starts_with("warn silent-mode")
                    && line.contains("phabricator.silent is ON in")
                    && line.contains(&local.setting()),
                "{line}"
            );

            // Only the database can be seen: never a plain "ok, off".
            let blind = on_db(db, &["doctor"]).await;
            let line = silent_mode_line(&blind);
            assert!(line.starts_with("warn silent-mode"), "{line}");
            assert!(line.contains("GORGE_PHORGE_LOCAL_CONFIG"), "{line}");
            assert!(line.contains("local.json"), "{line}");
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_what_it_cannot_see() {
    with_db(|db| async move {
        let run = on_db(&db, &["doctor"]).await;
        assert_eq!(run.status, 0, "unreadable checks warn, they do not fail");
        let line = silent_mode_line(&run);
        assert!(line.starts_with("warn silent-mode unknown:"), "{line}");
        assert!(
            line.contains(&format!("cannot read {}_config.config_entry", db.namespace)),
            "{line}"
        );
        assert!(line.contains("GORGE_PHORGE_LOCAL_CONFIG"), "{line}");
        assert!(!line.contains("off"), "{line}");
        assert!(run.stdout.contains(&format!(
            "cannot read {}_worker.worker_activetask",
            db.namespace
        )));

        // A configured file that is not there is no better.
        let local = LocalJson::absent();
        let missing = doctor_with(&db, &local, &["doctor"]).await;
        let line = silent_mode_line(&missing);
        assert!(line.starts_with("warn silent-mode unknown:"), "{line}");
        assert!(line.contains("does not exist"), "{line}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_fails_an_account_that_may_only_read() {
    with_db(|db| async move {
        let granted = on_db(&db, &["doctor", "--json"]).await;
        let check = |run: &Run| {
            run.json()["checks"]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["check"] == "privileges"))
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(check(&granted)["verdict"], "ok", "{}", granted.stdout);

        let user = format!("{}_ro", db.namespace);
        with_account(&user, "SELECT", &db.database, async {
            let env = db_env(&db, &[("GORGE_WEBHOOK_MYSQL_USER", &user)]);
            let read_only = run(&env, &["doctor"]).await;
            eprintln!(
                "doctor: select-only exit={}\n{}",
                read_only.status, read_only.stdout
            );
            assert_eq!(read_only.status, 1, "{}", read_only.all_output());
            let line = read_only
                .stdout
                .lines()
                .find(|line| line.contains("privileges"))
                .unwrap_or_default();
            assert!(
                line.starts_with("FAIL  privileges")
                    && line.contains(&format!("UPDATE on {}.herald_webhookrequest", db.database)),
                "{}",
                read_only.stdout
            );
            assert!(!line.contains("herald_webhook "), "{line}");
            let json = run(&env, &["doctor", "--json"]).await;
            assert_eq!(check(&json)["verdict"], "fail", "{}", json.stdout);
        })
        .await;
    })
    .await;
}

/// The clock check's verdict and finding from `doctor --json`.
fn clock_check(run: &Run) -> (String, String) {
    let checks = run.json()["checks"].clone();
    let check = checks
        .as_array()
        .and_then(|all| all.iter().find(|c| c["check"] == "clock"))
        .unwrap_or_else(|| panic!("no clock check: {}", run.all_output()))
        .clone();
    (
        check["verdict"].as_str().unwrap_or_default().to_owned(),
        check["finding"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_measures_this_hosts_clock_against_the_servers() {
    with_db(|db| async move {
        let (verdict, finding) = clock_check(&on_db(&db, &["doctor", "--json"]).await);
        assert_eq!(verdict, "ok", "{finding}");
        assert!(finding.starts_with("this host's clock is 0.0"), "{finding}");

        // The same host with its wall clock an hour ahead (libfaketime).
        let mut env = db_env(&db, &[]);
        env.extend(shifted_clock("+1h"));
        let ahead = run(&env, &["doctor", "--json"]).await;
        let (verdict, finding) = clock_check(&ahead);
        assert_eq!(verdict, "warn", "{finding}");
        assert!(
            finding.starts_with("this host's clock is 3599.")
                || finding.starts_with("this host's clock is 3600."),
            "{finding}"
        );
        assert!(
            finding.contains(" s ahead of the database server's"),
            "{finding}"
        );
        let text = run(&env, &["doctor"]).await;
        assert!(text.stdout.contains("warn  clock"), "{}", text.stdout);
        assert!(
            text.stdout.contains("-> synchronise this host's clock"),
            "{}",
            text.stdout
        );
    })
    .await;
}

/// The account script, run as its header says for an existing server:
/// the statements it prints for `vars`.
fn account_script_sql(vars: &[(&str, &str)]) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/mariadb-init/10-accounts.sh"
    );
    let output = std::process::Command::new("bash")
        .arg(script)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .output()
        .expect("run bash");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("SQL is UTF-8")
}

/// Every application database the object check reads, with a table of each
/// name it probes (the probe reads no column), created where missing;
/// returns the databases it created.
async fn create_object_tables(namespace: &str) -> Vec<String> {
    let mut created = Vec::new();
    for tables in OBJECT_TABLES {
        for (application, table) in [
            (tables.object_application, tables.object_table),
            (tables.transaction_application, tables.transaction_table),
        ] {
            let database = format!("{namespace}_{application}");
            if application != "herald" && !created.contains(&database) {
                as_root(&format!("CREATE DATABASE IF NOT EXISTS `{database}`")).await;
                created.push(database.clone());
            }
            as_root(&format!(
                "CREATE TABLE IF NOT EXISTS `{database}`.`{table}` (id INT)"
            ))
            .await;
        }
    }
    created
}

/// deploy/mariadb-init/10-accounts.sh grants what doctor and the daemon
/// check: run as written against the server (with task adoption), the
/// account it makes passes every check doctor makes of a privilege, task
/// adoption's grant check finds nothing missing, and the attempt history
/// prepares its own database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_account_script_grants_what_doctor_checks() {
    with_db(|db| async move {
        let namespace = db.namespace.clone();
        with_phorge_side(&namespace, |_side| async {
            let databases = create_object_tables(&namespace).await;
            let user = format!("{namespace}_acct");
            let password = "script-test-password";
            let sql = account_script_sql(&[
                ("WEBHOOK_DB_PASSWORD", password),
                ("WEBHOOK_DB_USER", &user),
                ("PHORGE_NAMESPACE", &namespace),
                ("ADOPT_PHP_TASKS", "true"),
                ("HISTORY", "true"),
            ]);
            for statement in sql.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
                as_root(statement).await;
            }
            let local = LocalJson::silent("false");
            let env = db_env(
                &db,
                &[
                    ("GORGE_WEBHOOK_MYSQL_USER", &user),
                    ("GORGE_WEBHOOK_MYSQL_PASS", password),
                    ("GORGE_PHORGE_LOCAL_CONFIG", &local.setting()),
                ],
            );
            let report = run(&env, &["doctor", "--json"]).await;
            let mut config = webhook_test_support::mariadb::config(&namespace);
            config.user.clone_from(&user);
            config.password = password.to_owned();
            let store = MysqlStore::new(&config).expect("store config");
            let adoption = store.adoption_grants_missing().await;
            let _ = store.disconnect().await;
            // The attempt history, prepared as that account: it creates
            // its database and finds every privilege it needs.
            let history_database = format!("{namespace}_webhook_history");
            let history = MysqlHistory::new(
                &config,
                HistoryConfig::with_defaults(history_database.clone()),
                "doctor-test",
            )
            .expect("history config");
            let prepared = history.prepare().await.map_err(|e| e.to_string());
            let _ = history.disconnect().await;
            drop_database(&history_database).await;
            as_root(&format!("DROP USER IF EXISTS '{user}'@'%'")).await;
            for database in databases {
                drop_database(&database).await;
            }

            let checks = report.json()["checks"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for name in [
                "privileges",
                "silent-mode",
                "php-delivery",
                "php-runs",
                "objects",
            ] {
                let check = checks.iter().find(|c| c["check"] == name);
                assert_eq!(
                    check.map(|c| c["verdict"].clone()),
                    Some("ok".into()),
                    "{name}: {}",
                    report.stdout
                );
                // An ok that leans on one source while another is denied
                // (silent mode: the file read, the database not) is short
                // of a grant all the same.
                let finding = check.map(|c| c["finding"].to_string()).unwrap_or_default();
                assert!(
                    !finding.contains("cannot read") && !finding.contains("denied"),
                    "{name}: {finding}"
                );
            }
            assert_eq!(adoption.map_err(|e| e.to_string()), Ok(Vec::new()));
            assert_eq!(prepared, Ok(()));
        })
        .await;
    })
    .await;
}

/// The overdue check: a row due for longer than two claim leases (60 s on
/// the defaults) is listed with how long it waited and why, as `explain`
/// judges it; a row due for less, one waiting out its retry backoff and a
/// sent one are not; with none overdue the check is ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_lists_overdue_rows_and_why_they_wait() {
    with_db(|db| async move {
        let db = &db;
        with_phorge_side(&db.namespace, |_side| async move {
            const HOOK: &str = "PHID-HWBH-overdueaaaaaaaaaaaa";
            // A receiver in a documentation range, let through as an
            // operator lets an internal one through; `doctor` never calls it.
            db.insert_hook(&webhook_core::Hook {
                uri: "https://192.0.2.1/hook".to_owned(),
                ..crate::support::hook(HOOK, "overdue hook", "firehose")
            })
            .await;
            let env = db_env(db, &[("GORGE_WEBHOOK_OUTBOUND_ALLOW", "192.0.2.0/24")]);
            let now = db.now().await;
            let queued = |created: u64| NewRequest {
                date_created: Some(created),
                date_modified: Some(created),
                ..NewRequest::queued(HOOK, r#"{"retry":"forever"}"#)
            };
            let recent = db.insert_request(&queued(now - 20)).await;
            let healthy = run(&env, &["doctor", "--json"]).await;
            let overdue_of = |run: &Run| {
                run.json()["checks"]
                    .as_array()
                    .and_then(|all| all.iter().find(|c| c["check"] == "overdue").cloned())
                    .unwrap_or_else(|| panic!("no overdue check: {}", run.all_output()))
            };
            assert_eq!(
                overdue_of(&healthy)["verdict"],
                "ok",
                "row {recent} is due for 20 s"
            );

            let late = db.insert_request(&queued(now - 500)).await;
            db.insert_request(&NewRequest {
                last_request_result: LastResult::Fail,
                last_request_epoch: now - 10,
                ..queued(now - 900)
            })
            .await;
            db.insert_request(&NewRequest {
                status: RequestStatus::Sent,
                ..queued(now - 900)
            })
            .await;
            // What stalls it: a session holding the hook and never letting go.
            let mut holder = db.conn().await;
            let lock = webhook_core::hook_lock_name(&db.namespace, HOOK);
            holder
                .exec_drop("SELECT GET_LOCK(?, 0)", (&lock,))
                .await
                .expect("GET_LOCK");
            let worried = run(&env, &["doctor"]).await;
            assert_eq!(
                worried.status,
                0,
                "overdue rows warn: {}",
                worried.all_output()
            );
            let lines: Vec<&str> = worried
                .stdout
                .lines()
                .skip_while(|line| !line.contains("overdue"))
                .collect();
            assert!(
                lines[0].starts_with(
                    "warn  overdue       1 row(s) due for longer than two claim leases (1m 0s)"
                ),
                "{}",
                worried.stdout
            );
            let phid = db.row(late).await.phid;
            assert!(
                lines[1].contains(&format!("row {late} ({phid}, hook {HOOK}) due for 8m 2"))
                    && lines[1].contains(": eligible now: "),
                "{}",
                worried.stdout
            );
            assert!(
                lines[2..].iter().any(|line| line
                    .trim_start()
                    .starts_with("note: the hook's lock is held by database session")),
                "{}",
                worried.stdout
            );
            assert!(
                !worried.stdout.contains(&format!("row {recent} ")),
                "{}",
                worried.stdout
            );
        })
        .await;
    })
    .await;
}

/// The wake check: on a server without a binary log it says the probe
/// notices new rows and how to have the log followed; on one that keeps
/// a log the account may read, that new rows are noticed as they commit;
/// turned off, that the probe does the work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_how_new_rows_reach_the_daemon() {
    let wake = |run: &Run| {
        let checks = run.json()["checks"].clone();
        let check = checks
            .as_array()
            .and_then(|all| all.iter().find(|c| c["check"] == "wake").cloned())
            .unwrap_or_else(|| panic!("no wake check: {}", run.stdout));
        let text = |key: &str| check[key].as_str().unwrap_or_default().to_owned();
        (text("verdict"), text("finding"), text("advice"))
    };
    with_db(|db| async move {
        let (verdict, finding, advice) = wake(&run(&db_env(&db, &[]), &["doctor", "--json"]).await);
        assert_eq!(verdict, "ok");
        assert!(finding.contains("keeps no binary log"), "{finding}");
        assert!(advice.contains("GRANT REPLICATION SLAVE"), "{advice}");
        let off = db_env(&db, &[("GORGE_WEBHOOK_WAKE_BINLOG", "false")]);
        let (_, finding, _) = wake(&run(&off, &["doctor", "--json"]).await);
        assert!(
            finding.contains("GORGE_WEBHOOK_WAKE_BINLOG is off"),
            "{finding}"
        );
    })
    .await;
    let server = &BinlogServer::start().await;
    with_db_on(server.port(), |db| async move {
        let port = server.port().to_string();
        let env = db_env(&db, &[("GORGE_WEBHOOK_MYSQL_PORT", &port)]);
        let (verdict, finding, advice) = wake(&run(&env, &["doctor", "--json"]).await);
        assert_eq!(verdict, "ok");
        assert!(
            finding.contains("can follow the server's binary log"),
            "{finding}"
        );
        assert_eq!(advice, "");
    })
    .await;
}

/// The proxy check: none in force is fine; a proxy that answers is
/// reached, with the callable hooks counted by route; one that is down
/// fails the check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reaches_the_egress_proxy_and_counts_the_hooks_through_it() {
    let proxy_check = |run: &Run| {
        let checks = run.json()["checks"].clone();
        let check = checks
            .as_array()
            .and_then(|all| all.iter().find(|c| c["check"] == "proxy").cloned())
            .unwrap_or_else(|| panic!("no proxy check: {}", run.stdout));
        let text = |key: &str| check[key].as_str().unwrap_or_default().to_owned();
        (text("verdict"), text("finding"))
    };
    let mut proxy = Tinyproxy::start().await;
    let proxy = &mut proxy;
    with_db(|db| async move {
        for (phid, uri) in [
            (
                "PHID-HWBH-proxythroughaaaaaaaa",
                "https://hooks.example.com/x",
            ),
            (
                "PHID-HWBH-proxydirectaaaaaaaaa",
                "https://ci.internal.corp/x",
            ),
        ] {
            db.insert_hook(&webhook_core::Hook {
                phid: phid.to_owned(),
                name: phid.to_owned(),
                uri: uri.to_owned(),
                status: "enabled".to_owned(),
                hmac_key: "k".to_owned(),
            })
            .await;
        }
        let (verdict, finding) = proxy_check(&run(&db_env(&db, &[]), &["doctor", "--json"]).await);
        assert_eq!(
            (verdict.as_str(), finding.as_str()),
            ("ok", "no egress proxy: calls go straight to receivers")
        );
        let url = proxy.url(None);
        let vars = db_env(&db, &[("HTTPS_PROXY", &url), ("NO_PROXY", "internal.corp")]);
        let (verdict, finding) = proxy_check(&run(&vars, &["doctor", "--json"]).await);
        assert_eq!(verdict, "ok", "{finding}");
        assert!(
            finding.ends_with("1 callable hook(s) go through it, 1 directly"),
            "{finding}"
        );
        proxy.stop();
        let (verdict, finding) = proxy_check(&run(&vars, &["doctor", "--json"]).await);
        assert_eq!(verdict, "fail", "{finding}");
        assert!(
            finding.contains("cannot reach http://127.0.0.1:")
                && finding.contains("the egress proxy is unreachable"),
            "{finding}"
        );
    })
    .await;
}
