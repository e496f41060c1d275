//! The release tarball's install check, ignored unless asked for: `cargo
//! xtask dist --check` installs the tarball into a clean Debian root with
//! its documented command and runs this module with
//! `WEBHOOK_INSTALLED_ROOT` naming that root. The root shares the host's
//! network (loopback: the local MariaDB and a recording receiver).
//!
//! It starts what systemd would: the unit's `ExecStart` with the settings
//! of its `EnvironmentFile`, as installed, under chroot as an unprivileged
//! user (the unit's `DynamicUser`), with only the database account, the
//! namespace, the listen address and the outbound allow list for the
//! loopback receiver changed from the installed file. Each check prints
//! what it saw.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use webhook_test_support::with_db;

use crate::daemon::{free_port, http};
use crate::e2e::DEADLINE;
use crate::image::{one_row_to_deliver, until_sent};

/// The installed root, from `cargo xtask dist --check`.
fn installed_root() -> PathBuf {
    std::env::var_os("WEBHOOK_INSTALLED_ROOT")
        .map(PathBuf::from)
        .expect(
            "WEBHOOK_INSTALLED_ROOT is not set: run this test through `cargo xtask dist --check`",
        )
}

/// `key=value` of the installed unit's `[Service]` lines.
fn unit_value(root: &Path, key: &str) -> String {
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/gorge-webhook.service"))
        .expect("the unit is installed");
    unit.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the installed unit has no {key}="))
        .to_owned()
}

/// The variables of an environment file as systemd reads it: `KEY=VALUE`
/// lines, `#` comments and blank lines skipped.
fn environment_file(root: &Path, path: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root.join(path.trim_start_matches('/')))
        .expect("the environment file is installed");
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Runs `program args` inside the root (as root); its stdout.
fn inside(root: &Path, args: &[&str]) -> String {
    let output = Command::new("/usr/sbin/chroot")
        .arg(root)
        .args(args)
        .output()
        .expect("run chroot");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
#[ignore = "needs an installed root: run through `cargo xtask dist --check`"]
fn the_install_puts_binaries_pages_and_completions_in_place() {
    let root = installed_root();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        inside(&root, &["/usr/local/bin/webhook-daemon", "--version"]).trim(),
        format!("webhook-daemon {version}")
    );
    let help = inside(&root, &["/usr/local/bin/webhook-admin", "help", "config"]);
    assert!(help.contains("Usage: webhook-admin config"), "{help}");
    for file in [
        "usr/local/share/man/man1/webhook-daemon.1",
        "usr/local/share/man/man1/webhook-admin.1",
        "usr/local/share/man/man1/webhook-admin-doctor.1",
        "usr/local/share/bash-completion/completions/webhook-admin",
        "usr/local/share/zsh/site-functions/_webhook-daemon",
        "usr/local/share/fish/vendor_completions.d/webhook-admin.fish",
        "usr/local/share/gorge-webhook/10-accounts.sh",
        "usr/local/share/doc/gorge-webhook/jemalloc-COPYING",
    ] {
        assert!(root.join(file).is_file(), "{file} is not installed");
    }
    let settings = std::fs::metadata(root.join("etc/gorge-webhook/env")).expect("settings");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(settings.permissions().mode() & 0o777, 0o600);
    println!("install check: binaries {version}, man pages, completions, settings 0600 in place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an installed root: run through `cargo xtask dist --check`"]
async fn the_units_command_delivers_as_an_unprivileged_user_and_stops_cleanly() {
    let root = installed_root();
    let exec = unit_value(&root, "ExecStart");
    let mut env = environment_file(&root, &unit_value(&root, "EnvironmentFile"));
    with_db(|db| async move {
        let (receiver, id) = one_row_to_deliver(&db, "installcheck", "/installed").await;
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        for (key, value) in [
            ("GORGE_WEBHOOK_MYSQL_USER", "root"),
            ("GORGE_WEBHOOK_MYSQL_PASS", ""),
            ("GORGE_WEBHOOK_MYSQL_HOST", "127.0.0.1"),
            ("GORGE_WEBHOOK_NAMESPACE", db.namespace.as_str()),
            ("GORGE_LISTEN_ADDR", listen.as_str()),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
        ] {
            env.retain(|(k, _)| k != key);
            env.push((key.to_owned(), value.to_owned()));
        }
        // What systemd gives every service besides its EnvironmentFile.
        env.push((
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        ));
        let started = Instant::now();
        let log_path =
            std::env::temp_dir().join(format!("install-check-{}.log", std::process::id()));
        let log_file = std::fs::File::create(&log_path).expect("create the log file");
        let mut daemon = Running(Some(
            Command::new("/usr/sbin/chroot")
                .args(["--userspec=65534:65534"])
                .arg(&root)
                .arg(&exec)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .expect("start the unit's command"),
        ));

        let addr = listen.parse().expect("address");
        let ready = loop {
            match http(addr, "GET", "/readyz", &[], b"").await {
                Ok(response) if response.status == 200 => break response,
                _ if started.elapsed() < DEADLINE => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!("not ready: {other:?}"),
            }
        };
        println!(
            "install check: {exec} as uid 65534: /readyz {}",
            ready.status
        );
        let got = receiver.wait_for(1, DEADLINE).await;
        assert_eq!(got.len(), 1, "one delivery expected");
        until_sent(&db, id).await;
        println!(
            "install check: row {id} sent to {} in {:.1} s",
            got[0].path,
            started.elapsed().as_secs_f64()
        );

        let mut child = daemon.0.take().expect("running");
        let pid = child.id().to_string();
        let signalled = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(signalled.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let status = child.wait().expect("wait for the daemon");
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let _ = std::fs::remove_file(&log_path);
        assert_eq!(status.code(), Some(0), "{log}");
        assert!(log.contains("stopped"), "{log}");
        println!("install check: SIGTERM: exit 0");
    })
    .await;
}

/// The unit's command while it runs: killed when a check fails before the
/// test stops it, so no daemon outlives the test.
struct Running(Option<std::process::Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
