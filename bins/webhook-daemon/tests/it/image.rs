//! The container image's smoke test, ignored unless asked for: `cargo
//! xtask image` builds the image and runs this module with
//! `WEBHOOK_IMAGE_ENGINE` (`docker` or `podman`) and
//! `WEBHOOK_IMAGE` set. The container shares the host's network
//! (loopback only) to reach the local MariaDB and the recording receiver,
//! on a database of its own that is dropped afterwards.
//!
//! Each check prints what it saw and how long it took, for the record
//! `cargo xtask image` leaves; the image build itself is xtask's.

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use webhook_core::memory_store::NewRequest;
use webhook_core::RequestStatus;
use webhook_test_support::mariadb::{
    create_database, dropping_after, server_conn, unique_namespace, HOOK_TABLE_DDL,
    REQUEST_TABLE_DDL,
};
use webhook_test_support::{with_db, LocalJson, Receiver};

use crate::allocator::{assert_built_in_settings, PRINT_STATS};
use crate::daemon::{free_port, http};
use crate::e2e::{add_hook, delivery_env, pairs, DEADLINE};

/// The unprivileged account the `Dockerfile` runs the daemon as.
const UID: &str = "uid=10001";
/// Longer than the daemon's shutdown grace (30 s), as compose.yaml's
/// `stop_grace_period` is.
const STOP_TIMEOUT_SECS: &str = "45";

/// The engine and image under test, from `cargo xtask image`.
struct Subject {
    engine: String,
    image: String,
}

impl Subject {
    fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run this test through `cargo xtask image`")
            })
        };
        Self {
            engine: var("WEBHOOK_IMAGE_ENGINE"),
            image: var("WEBHOOK_IMAGE"),
        }
    }

    /// Runs the engine with `args`; the output, whatever the exit status.
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.engine)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", self.engine))
    }

    /// Starts the image in the background as `name`, on the host's network
    /// (its loopback: the local MariaDB and the receiver), with the
    /// engine's `options` and the daemon's `env`.
    fn start(&self, name: String, options: &[String], env: &[(String, String)]) -> Container<'_> {
        let mut args = ["run", "--detach", "--name", &name, "--network", "host"]
            .map(str::to_owned)
            .to_vec();
        args.extend_from_slice(options);
        for (key, value) in env {
            args.extend(["--env".to_owned(), format!("{key}={value}")]);
        }
        args.push(self.image.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ok(&args);
        Container {
            subject: self,
            name,
        }
    }

    /// Runs the engine with `args`, which must succeed; trimmed stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "{} {} failed ({}): {}{}",
            self.engine,
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

/// A named container, removed (forcibly) when dropped.
struct Container<'a> {
    subject: &'a Subject,
    name: String,
}

impl Container<'_> {
    fn logs(&self) -> String {
        let output = self.subject.run(&["logs", &self.name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self.subject.run(&["rm", "--force", &self.name]);
    }
}

/// Runs `body`, printing the check's name, what it saw and how long it
/// took.
fn check(name: &str, body: impl FnOnce() -> String) {
    let started = Instant::now();
    let seen = body();
    println!(
        "image check: {name} ({:.1} s)\n  {}",
        started.elapsed().as_secs_f64(),
        seen.replace('\n', "\n  ")
    );
}

/// Retries `probe` every half second until it succeeds or `deadline`
/// passes; the last answer either way.
fn until(
    deadline: Duration,
    mut probe: impl FnMut() -> Result<String, String>,
) -> Result<String, String> {
    let started = Instant::now();
    loop {
        let answer = probe();
        if answer.is_ok() || started.elapsed() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
    .trim()
    .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a built image: run through `cargo xtask image`"]
async fn the_image_delivers_as_the_unprivileged_user_and_stops_cleanly() {
    let subject = Subject::from_env();
    let image = subject.image.as_str();
    let version = env!("CARGO_PKG_VERSION");

    check("runs as the unprivileged user (id)", || {
        let id = subject.ok(&["run", "--rm", "--entrypoint", "id", image]);
        assert!(id.starts_with(UID), "the container runs as {id}, not {UID}");
        id
    });
    check("both binaries report their version", || {
        let daemon = subject.ok(&["run", "--rm", image, "--version"]);
        let admin = subject.ok(&[
            "run",
            "--rm",
            "--entrypoint",
            "webhook-admin",
            image,
            "--version",
        ]);
        assert_eq!(daemon, format!("webhook-daemon {version}"));
        assert_eq!(admin, format!("webhook-admin {version}"));
        format!("{daemon}\n{admin}")
    });

    check(
        "the daemon allocates with the built-in jemalloc settings",
        || {
            let output = subject.run(&[
                "run",
                "--rm",
                "--env",
                &format!("{}={}", PRINT_STATS.0, PRINT_STATS.1),
                image,
                "--version",
            ]);
            assert!(output.status.success(), "{}", text(&output));
            assert_built_in_settings(&String::from_utf8_lossy(&output.stderr))
        },
    );

    let subject = &subject;
    with_db(|db| async move {
        let (receiver, id) = one_row_to_deliver(&db, "imagesmoketest", "/image").await;

        let port = free_port();
        let name = format!("gorge-webhook-smoke-{}", db.namespace);
        let mut env = delivery_env(&db.namespace);
        env.extend(pairs(&[(
            "GORGE_LISTEN_ADDR",
            &format!("127.0.0.1:{port}"),
        )]));
        let mut options = Vec::new();
        if subject.engine == "docker" {
            // Docker runs a HEALTHCHECK only on its schedule (every 30 s).
            options.push("--health-interval=2s".to_owned());
        }
        let container = subject.start(name, &options, &env);

        check("the image's HEALTHCHECK turns healthy", || {
            let healthy = until(DEADLINE, || health(subject, &container.name));
            healthy.unwrap_or_else(|last| panic!("not healthy: {last}\n{}", container.logs()))
        });
        check("/readyz turns 200 against the host's MariaDB", || {
            let ready = until(DEADLINE, || {
                let output =
                    subject.run(&["exec", &container.name, "gorge-webhook-probe", "/readyz"]);
                if output.status.success() {
                    Ok("gorge-webhook-probe /readyz: exit 0 (HTTP 200)".to_owned())
                } else {
                    Err(text(&output))
                }
            });
            ready.unwrap_or_else(|last| panic!("not ready: {last}\n{}", container.logs()))
        });

        let started = Instant::now();
        let got = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(got.len(), 1, "one delivery expected\n{}", container.logs());
        let row = until_sent(&db, id).await;
        println!(
            "image check: one queued row is delivered ({:.1} s)\n  \
             receiver got {} {}; row {id} is {:?}",
            started.elapsed().as_secs_f64(),
            got[0].method,
            got[0].path,
            row,
        );

        check("SIGTERM stops it cleanly", || {
            subject.ok(&["stop", "--time", STOP_TIMEOUT_SECS, &container.name]);
            let code = subject.ok(&[
                "inspect",
                "--format",
                "{{.State.ExitCode}}",
                &container.name,
            ]);
            let logs = container.logs();
            let stopped = logs
                .lines()
                .find(|line| line.contains(r#"event="stopped""#))
                .unwrap_or_else(|| panic!("no stopped event in the log:\n{logs}"))
                .to_owned();
            assert_eq!(code, "0", "exit code after SIGTERM\n{logs}");
            format!("exit code {code}\n{stopped}")
        });
        // Counted once the daemon has stopped: no second POST can come later.
        let posts = receiver.requests();
        assert_eq!(posts.len(), 1, "exactly one POST expected: {posts:?}");
        println!("image check: the receiver got exactly one POST in all");
    })
    .await;
}

/// The image's own HEALTHCHECK, run now: podman runs it on demand; Docker
/// only on its schedule, so its state is read instead.
fn health(subject: &Subject, name: &str) -> Result<String, String> {
    if subject.engine == "podman" {
        let output = subject.run(&["healthcheck", "run", name]);
        let said = text(&output);
        if output.status.success() {
            Ok(format!("podman healthcheck run: exit 0 {said}")
                .trim_end()
                .to_owned())
        } else {
            Err(said)
        }
    } else {
        let state = subject.ok(&["inspect", "--format", "{{.State.Health.Status}}", name]);
        if state == "healthy" {
            Ok(format!("docker inspect: {state}"))
        } else {
            Err(state)
        }
    }
}

/// A recording receiver, a hook `PHID-HWBH-{name}…` calling it at `path`,
/// and one queued row for that hook (not retried): the receiver and the
/// row's id.
pub(crate) async fn one_row_to_deliver(
    db: &webhook_test_support::TestDb,
    name: &str,
    path: &str,
) -> (Receiver, u64) {
    let receiver = Receiver::start().await;
    let hook = format!("PHID-HWBH-{name:0<20}");
    add_hook(db, &hook, receiver.url(path), &format!("{name}key")).await;
    let id = db
        .insert_request(&NewRequest::queued(&hook, r#"{"retry":"never"}"#))
        .await;
    (receiver, id)
}

/// Polls row `id` until it is `sent`; its status then.
pub(crate) async fn until_sent(db: &webhook_test_support::TestDb, id: u64) -> RequestStatus {
    let started = Instant::now();
    loop {
        let row = db.row(id).await;
        if row.status == RequestStatus::Sent || started.elapsed() > DEADLINE {
            assert_eq!(row.status, RequestStatus::Sent, "row {id}: {row:?}");
            return row.status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Phorge's side of the start-up order and of silent mode, against the
/// container: it starts before the herald database exists (`/readyz` 503
/// naming it), turns ready by itself once the database appears, and holds
/// delivery when `phabricator.silent` is written into Phorge's
/// `conf/local`, which it sees through a read-only mount as
/// deploy/compose.yaml gives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a built image: run through `cargo xtask image`"]
async fn the_image_waits_for_phorges_database_and_sees_silent_mode_read_only() {
    let subject = Subject::from_env();
    let subject = &subject;
    let namespace = unique_namespace();
    let database = format!("{namespace}_herald");
    let local = LocalJson::silent("false");
    let conf_local = local
        .path()
        .parent()
        .expect("local.json is in conf/local")
        .to_string_lossy()
        .into_owned();
    dropping_after(&database, async {
        let port = free_port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let name = format!("gorge-webhook-startup-{namespace}");
        let mut env = delivery_env(&namespace);
        env.extend(pairs(&[
            ("GORGE_LISTEN_ADDR", &addr.to_string()),
            ("GORGE_PHORGE_LOCAL_CONFIG", "/phorge/conf/local/local.json"),
        ]));
        let options = [
            "--volume".to_owned(),
            format!("{conf_local}:/phorge/conf/local:ro"),
            // The confinement deploy/compose.yaml gives the service.
            "--read-only".to_owned(),
            "--cap-drop=ALL".to_owned(),
            "--security-opt=no-new-privileges".to_owned(),
        ];
        let container = subject.start(name, &options, &env);

        let started = Instant::now();
        let before = until_async(|| readyz(addr, 503))
            .await
            .unwrap_or_else(|last| panic!("/readyz: {last}\n{}", container.logs()));
        assert!(
            before.contains(&database) && before.contains("does not exist"),
            "{before}"
        );
        println!(
            "image check: started before the database exists ({:.1} s)\n  /readyz 503 {before}",
            started.elapsed().as_secs_f64()
        );

        // Phorge's storage upgrade, while the container runs.
        let started = Instant::now();
        create_database(&database).await;
        let mut conn = server_conn().await;
        for statement in [
            format!("USE `{database}`"),
            REQUEST_TABLE_DDL.to_owned(),
            HOOK_TABLE_DDL.to_owned(),
        ] {
            conn.query_drop(statement).await.expect("create the tables");
        }
        let turned = until_async(|| ready(addr))
            .await
            .unwrap_or_else(|last| panic!("not ready: {last}\n{}", container.logs()));
        println!(
            "image check: ready once the database appears ({:.1} s)\n  /readyz 200 {turned}",
            started.elapsed().as_secs_f64()
        );

        let started = Instant::now();
        local.write(&LocalJson::text("true"));
        let held = until_async(|| async {
            container
                .logs()
                .lines()
                .find(|line| line.contains(r#"event="silent_mode_on""#))
                .map(str::to_owned)
                .ok_or_else(|| "no silent_mode_on yet".to_owned())
        })
        .await
        .unwrap_or_else(|last| panic!("{last}\n{}", container.logs()));
        // Ready all the same (holding is what delivery should do now),
        // with exactly the documented body; `/metrics` says it holds.
        let still = ready(addr)
            .await
            .unwrap_or_else(|last| panic!("not ready while silent: {last}"));
        assert_eq!(still, r#"{"status":"ok"}"#);
        let metrics = http(addr, "GET", "/metrics", &[], b"")
            .await
            .map(|answer| answer.text())
            .unwrap_or_else(|err| panic!("/metrics: {err}"));
        let gauge = metrics
            .lines()
            .find(|line| line.starts_with("gorge_webhook_silent_mode "))
            .unwrap_or_default()
            .to_owned();
        assert_eq!(gauge, "gorge_webhook_silent_mode 1", "delivery is not held");
        println!(
            "image check: silent mode seen through the read-only conf/local ({:.1} s)\n  \
             {held}\n  /readyz 200 {still}, /metrics {gauge}",
            started.elapsed().as_secs_f64()
        );
    })
    .await;
}

/// `/readyz` from the host: its body once it answers 200.
async fn ready(addr: SocketAddr) -> Result<String, String> {
    readyz(addr, 200).await
}

/// `/readyz` from the host: its body if it answers `status`.
async fn readyz(addr: SocketAddr, status: u16) -> Result<String, String> {
    match http(addr, "GET", "/readyz", &[], b"").await {
        Ok(answer) if answer.status == status => Ok(answer.text().trim().to_owned()),
        Ok(answer) => Err(format!("{} {}", answer.status, answer.text())),
        Err(e) => Err(e.to_string()),
    }
}

/// [`until`] for async probes, with [`DEADLINE`].
async fn until_async<F, Fut>(mut probe: F) -> Result<String, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let started = Instant::now();
    loop {
        let answer = probe().await;
        if answer.is_ok() || started.elapsed() > DEADLINE {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
