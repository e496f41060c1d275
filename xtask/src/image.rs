//! `cargo xtask image`: builds the container image from the `Dockerfile`
//! and smoke-tests it against the local MariaDB.
//!
//! The engine is Docker where one answers (`docker info` succeeds; a client
//! without a daemon does not count), else podman. With Docker the
//! `Dockerfile` is built as is, from Docker Hub's bases. With podman the
//! packages it needs (podman, runc, debootstrap) are installed from
//! Debian's when missing, as `prometheus` installs promtool, and podman is
//! run with a `containers.conf` of our own (runc, the cgroupfs manager, no
//! default ulimits) because machines with hybrid cgroups refuse crun. No
//! registry is assumed: the two base images the `Dockerfile` takes as
//! build arguments (`RUST_IMAGE`, `RUNTIME_IMAGE`) are made locally with
//! debootstrap, the builder with this machine's own Rust toolchain copied
//! in, and kept for the next run. The `Dockerfile` itself, and so what it
//! produces for everyone else, is unchanged.
//!
//! The smoke test is the daemon's ignored integration test `image`
//! (bins/webhook-daemon/tests/it/image.rs), run with the engine and the
//! image named in its environment; it owns the checks and their output,
//! this module owns the tools, the bases, the build and the timings.
//! Large artefacts (root file systems, tarballs) live under
//! [`SCRATCH`], never in the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{mariadb, root};

/// The tag the built image gets.
pub(crate) const IMAGE: &str = "localhost/gorge-webhook:smoke";
/// Debian's release the `Dockerfile`'s bases are made from.
const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";
/// Root file systems and tarballs of the local bases (hundreds of MB).
const SCRATCH: &str = "/var/tmp/gorge-webhook-image";
/// The local stand-in for `debian:bookworm-slim`.
const RUNTIME_BASE: &str = "localhost/gorge-webhook-base/debian:bookworm-minbase";
/// Where the builder base keeps the copied toolchain (its `bin` goes on
/// `PATH`; rustc finds its libraries relative to itself).
const TOOLCHAIN_DIR: &str = "/usr/local/rust";
/// What the `Dockerfile`'s builder stage needs beyond minbase: a C
/// compiler and libc headers for ring, make for jemalloc's build, and CA
/// roots for cargo's TLS to crates.io. The builder base's tag names them,
/// so a machine that made it with another list makes it again.
const BUILDER_PACKAGES: [&str; 4] = ["gcc", "libc6-dev", "make", "ca-certificates"];
/// Where Debian keeps the CA roots cargo's TLS reads.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The Debian packages podman-based builds need, by the command they give.
const PODMAN_TOOLS: [(&str, &str); 3] = [
    ("podman", "podman"),
    ("runc", "runc"),
    ("debootstrap", "debootstrap"),
];
/// runc rather than crun (which refuses hybrid cgroups), the cgroupfs
/// manager (no systemd here to delegate to), and no default ulimits
/// (podman's default nofile ulimit exceeds what an unprivileged container
/// may set in some sandboxes).
const CONTAINERS_CONF: &str = "\
[containers]
default_ulimits = []

[engine]
runtime = \"runc\"
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
";

/// A container engine and the environment it runs with.
#[derive(Clone, Debug)]
pub(crate) struct Engine {
    pub(crate) program: &'static str,
    env: Vec<(String, String)>,
}

impl Engine {
    fn command(&self) -> Command {
        let mut command = Command::new(self.program);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    fn run(&self, args: &[&str]) -> Result<(), String> {
        eprintln!("xtask: running {} {}", self.program, args.join(" "));
        let status = self
            .command()
            .args(args)
            .status()
            .map_err(|e| format!("could not start {}: {e}", self.program))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {} failed ({status})",
                self.program,
                args.join(" ")
            ))
        }
    }

    /// stdout of a command that must succeed, trimmed.
    fn output(&self, args: &[&str]) -> Result<String, String> {
        let output = self
            .command()
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("could not start {}: {e}", self.program))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        } else {
            Err(format!(
                "{} {} failed ({})",
                self.program,
                args.join(" "),
                output.status
            ))
        }
    }

    fn has_image(&self, name: &str) -> bool {
        self.command()
            .args(["image", "inspect", "--format", "{{.Id}}", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}

/// Each step's name and how long it took, printed at the end.
#[derive(Default)]
struct Timings(Vec<(String, Duration)>);

impl Timings {
    fn step<T>(
        &mut self,
        name: &str,
        body: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, String> {
        eprintln!("xtask: image: {name}");
        let started = Instant::now();
        let result = body();
        let took = started.elapsed();
        eprintln!("xtask: image: {name}: {:.1} s", took.as_secs_f64());
        self.0.push((name.to_owned(), took));
        result
    }
}

/// Builds [`IMAGE`] and runs the smoke test on it.
pub(crate) fn image() -> Result<(), String> {
    let mut timings = Timings::default();
    let started = Instant::now();
    let engine = timings.step("engine and tools", engine)?;
    let build_args = if engine.program == "podman" {
        timings.step("local base images", || local_bases(&engine))?
    } else {
        Vec::new()
    };
    // Before the build, which takes minutes: the smoke test needs it.
    mariadb::ensure_running()?;
    timings.step("image build", || build(&engine, &build_args))?;
    let size = engine.output(&["image", "inspect", "--format", "{{.Size}}", IMAGE])?;
    timings.step("smoke test", || smoke_test(&engine))?;

    println!("image {IMAGE} built with {}", engine.program);
    println!("image size: {}", human_size(&size));
    for (name, took) in &timings.0 {
        println!("  {name:<20} {:>7.1} s", took.as_secs_f64());
    }
    println!(
        "  {:<20} {:>7.1} s",
        "total",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Docker when an engine answers, else podman (installed when missing)
/// with our `containers.conf` unless the caller names one.
fn engine() -> Result<Engine, String> {
    let docker_answers = Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if docker_answers {
        return Ok(Engine {
            program: "docker",
            env: Vec::new(),
        });
    }
    eprintln!("xtask: no Docker engine answers (`docker info`); using podman");
    ensure_tools()?;
    let mut env = Vec::new();
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        let conf = scratch_conf_path();
        if let Some(dir) = conf.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("could not create {}: {e}", dir.display()))?;
        }
        std::fs::write(&conf, CONTAINERS_CONF)
            .map_err(|e| format!("could not write {}: {e}", conf.display()))?;
        env.push(("CONTAINERS_CONF".to_owned(), conf.display().to_string()));
    }
    Ok(Engine {
        program: "podman",
        env,
    })
}

fn scratch_conf_path() -> PathBuf {
    root().join("target/xtask-image/containers.conf")
}

/// Installs the Debian packages of [`PODMAN_TOOLS`] whose command is
/// missing.
fn ensure_tools() -> Result<(), String> {
    let missing: Vec<&str> = PODMAN_TOOLS
        .iter()
        .filter(|(command, _)| !crate::command_found(command))
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "xtask: {} not installed; installing Debian's packages (once per machine)",
        missing.join(", ")
    );
    crate::apt_install(&missing).map_err(|err| {
        format!(
            "{err}; install them (Debian: apt-get install {})",
            missing.join(" ")
        )
    })
}

/// The build arguments naming the local bases, made when missing.
fn local_bases(engine: &Engine) -> Result<Vec<String>, String> {
    if !engine.has_image(RUNTIME_BASE) {
        let rootfs = debootstrap("runtime", None)?;
        import(engine, &rootfs, RUNTIME_BASE, &[])?;
    }
    let toolchain = Toolchain::find()?;
    let builder = format!(
        "localhost/gorge-webhook-base/rust:{}-bookworm-{}",
        toolchain.version,
        BUILDER_PACKAGES.join(".")
    );
    if !engine.has_image(&builder) {
        let rootfs = debootstrap("builder", Some(&BUILDER_PACKAGES.join(",")))?;
        toolchain.copy_into(&rootfs)?;
        trust_host_roots(&rootfs)?;
        let path = format!(
            "ENV PATH=/usr/local/cargo/bin:{TOOLCHAIN_DIR}/bin:\
             /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
        import(
            engine,
            &rootfs,
            &builder,
            &["ENV CARGO_HOME=/usr/local/cargo", &path],
        )?;
    }
    Ok(vec![
        format!("RUST_IMAGE={builder}"),
        format!("RUNTIME_IMAGE={RUNTIME_BASE}"),
    ])
}

/// The host's CA bundle replaces Debian's in the builder base, so cargo
/// reaches crates.io wherever the host does (through a TLS-inspecting
/// egress proxy, say). Only the builder stage sees it; the runtime image
/// has no CA bundle at all (the `Dockerfile` says why).
fn trust_host_roots(rootfs: &Path) -> Result<(), String> {
    let host = Path::new(HOST_CA_BUNDLE);
    if !host.is_file() {
        return Ok(());
    }
    let copy = rootfs.join(HOST_CA_BUNDLE.trim_start_matches('/'));
    std::fs::copy(host, &copy).map(drop).map_err(|e| {
        format!(
            "could not copy {} to {}: {e}",
            host.display(),
            copy.display()
        )
    })
}

/// A minbase Debian root file system under [`SCRATCH`], made afresh.
fn debootstrap(name: &str, include: Option<&str>) -> Result<PathBuf, String> {
    let rootfs = Path::new(SCRATCH).join(name);
    remove_dir(&rootfs)?;
    std::fs::create_dir_all(&rootfs)
        .map_err(|e| format!("could not create {}: {e}", rootfs.display()))?;
    let include = include.map(|packages| format!("--include={packages}"));
    let rootfs_arg = rootfs.display().to_string();
    let mut args = vec!["--variant=minbase"];
    args.extend(include.as_deref());
    args.extend([SUITE, &rootfs_arg, MIRROR]);
    crate::run("debootstrap", &args)?;
    // Package lists and downloaded archives only make the image bigger.
    for dir in ["var/lib/apt/lists", "var/cache/apt"] {
        clear_dir(&rootfs.join(dir))?;
    }
    Ok(rootfs)
}

/// Removes `dir` and what it holds; a missing one is fine.
pub(crate) fn remove_dir(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("could not remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

fn clear_dir(dir: &Path) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("could not read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("could not read {}: {e}", dir.display()))?
            .path();
        if path.is_dir() {
            remove_dir(&path)?;
        } else {
            std::fs::remove_file(&path)
                .map_err(|e| format!("could not remove {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Packs `rootfs` and imports it as `name`, then removes both.
fn import(engine: &Engine, rootfs: &Path, name: &str, env: &[&str]) -> Result<(), String> {
    let tarball = rootfs.with_extension("tar");
    crate::run(
        "tar",
        &[
            "-C",
            &rootfs.display().to_string(),
            "--numeric-owner",
            "-cf",
            &tarball.display().to_string(),
            ".",
        ],
    )?;
    let mut args = vec!["import"];
    for change in env {
        args.extend(["--change", change]);
    }
    args.extend(["--change", "CMD [\"bash\"]"]);
    let tarball_arg = tarball.display().to_string();
    args.extend([tarball_arg.as_str(), name]);
    let imported = engine.run(&args);
    let _ = std::fs::remove_file(&tarball);
    remove_dir(rootfs)?;
    imported
}

/// This machine's Rust toolchain, as rustup or a plain install keeps it.
struct Toolchain {
    sysroot: PathBuf,
    version: String,
}

impl Toolchain {
    fn find() -> Result<Self, String> {
        let ask = |args: &[&str]| -> Result<String, String> {
            let output = Command::new("rustc")
                .args(args)
                .output()
                .map_err(|e| format!("could not start rustc: {e}"))?;
            if output.status.success() {
                Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
            } else {
                Err(format!(
                    "rustc {} failed ({})",
                    args.join(" "),
                    output.status
                ))
            }
        };
        let sysroot = PathBuf::from(ask(&["--print", "sysroot"])?);
        let version = ask(&["--version"])?
            .split_whitespace()
            .nth(1)
            .ok_or("rustc --version printed no version")?
            .to_owned();
        Ok(Self { sysroot, version })
    }

    /// cargo, rustc and the libraries (the standard library's rlibs,
    /// rustc's own shared objects); not the documentation.
    fn copy_into(&self, rootfs: &Path) -> Result<(), String> {
        let target = rootfs.join(TOOLCHAIN_DIR.trim_start_matches('/'));
        let bin = target.join("bin");
        std::fs::create_dir_all(&bin)
            .map_err(|e| format!("could not create {}: {e}", bin.display()))?;
        for tool in ["cargo", "rustc"] {
            let from = self.sysroot.join("bin").join(tool);
            if !from.is_file() {
                return Err(format!(
                    "{} is missing: the toolchain has no {tool}",
                    from.display()
                ));
            }
            crate::run(
                "cp",
                &[
                    "-a",
                    &from.display().to_string(),
                    &bin.display().to_string(),
                ],
            )?;
        }
        crate::run(
            "cp",
            &[
                "-a",
                &self.sysroot.join("lib").display().to_string(),
                &target.display().to_string(),
            ],
        )
    }
}

/// The `Dockerfile` as it is, with the bases named by `build_args`.
fn build(engine: &Engine, build_args: &[String]) -> Result<(), String> {
    let root = root().display().to_string();
    let mut args = vec!["build", "--tag", IMAGE];
    if engine.program == "podman" {
        // Docker's format keeps HEALTHCHECK (OCI's has no such field); the
        // host network lets cargo reach crates.io from the builder.
        args.extend(["--format", "docker", "--network", "host"]);
    }
    for arg in build_args {
        args.extend(["--build-arg", arg]);
    }
    args.push(&root);
    engine.run(&args)
}

/// The module of the daemon's test binary holding the smoke test.
const SMOKE_TEST_MODULE: &str = "image";

/// The daemon's ignored `image` tests, against [`IMAGE`].
fn smoke_test(engine: &Engine) -> Result<(), String> {
    let mut env = engine.env.clone();
    env.push(("WEBHOOK_IMAGE_ENGINE".to_owned(), engine.program.to_owned()));
    env.push(("WEBHOOK_IMAGE".to_owned(), IMAGE.to_owned()));
    crate::ignored_daemon_tests(SMOKE_TEST_MODULE, &env)
}

/// `123456789` bytes as `123456789 bytes (117.7 MiB)`.
fn human_size(bytes: &str) -> String {
    match bytes.parse::<u64>() {
        #[allow(clippy::cast_precision_loss)]
        Ok(n) => format!("{n} bytes ({:.1} MiB)", n as f64 / (1024.0 * 1024.0)),
        Err(_) => bytes.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_mebibytes() {
        assert_eq!(human_size("1048576"), "1048576 bytes (1.0 MiB)");
        assert_eq!(human_size("n/a"), "n/a");
    }

    /// `cargo test` with a filter that matches nothing passes: the module
    /// and its ignored tests must be where [`smoke_test`] looks.
    #[test]
    fn the_smoke_test_is_where_it_is_run_from() {
        let tests = root().join("bins/webhook-daemon/tests/it");
        let main = std::fs::read_to_string(tests.join("main.rs")).expect("readable");
        assert!(
            main.contains(&format!("mod {SMOKE_TEST_MODULE};")),
            "{main}"
        );
        let module = std::fs::read_to_string(tests.join(format!("{SMOKE_TEST_MODULE}.rs")))
            .expect("readable");
        assert!(module.matches("#[ignore").count() >= 2, "{module}");
        for var in ["WEBHOOK_IMAGE_ENGINE", "WEBHOOK_IMAGE"] {
            assert!(module.contains(var), "the smoke test does not read {var}");
        }
    }

    /// The daemon's allocator settings live in `.cargo/config.toml`; a
    /// build context without it gets jemalloc's defaults.
    #[test]
    fn the_build_context_keeps_the_cargo_configuration() {
        let ignored = std::fs::read_to_string(root().join(".dockerignore")).expect("readable");
        let excluded: Vec<&str> = ignored
            .lines()
            .map(str::trim)
            .filter(|line| line.trim_start_matches("**/").starts_with(".cargo"))
            .collect();
        assert!(excluded.is_empty(), ".dockerignore leaves out {excluded:?}");
    }

    #[test]
    fn the_dockerfile_takes_both_bases_as_build_arguments() {
        let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("readable");
        for arg in ["RUST_IMAGE", "RUNTIME_IMAGE"] {
            assert!(
                dockerfile.contains(&format!("ARG {arg}=")),
                "the Dockerfile has no ARG {arg}"
            );
            assert!(
                dockerfile.contains(&format!("FROM ${{{arg}}}")),
                "no stage is FROM ${{{arg}}}"
            );
        }
    }
}
