//! `cargo xtask fuzz`: the libFuzzer targets of `fuzz/` (docs/fuzzing.md),
//! built with coverage instrumentation on the stable toolchain and run one
//! after another, each in one process (one core) for a fixed time, seeded
//! from the committed corpus. The default is a short round (30 s per
//! target); longer runs, and `--merge` to fold what they found into
//! `fuzz/corpus/`, are for developers. `cargo xtask ci` runs the short
//! round after the tests (which replay the corpus without libFuzzer).
//!
//! Nothing is installed: the instrumentation is cargo-fuzz's without a
//! sanitizer, and every flag it needs is a stable rustc option. Scratch
//! corpora, logs and crashing inputs go under `<target dir>/fuzz/`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::root;

/// Every target, as `fuzz/fuzz_targets/<name>.rs` names it.
pub(crate) const TARGETS: &[&str] = &["properties", "payload", "config", "api"];

/// Seconds per target when `--seconds` is not given.
pub(crate) const DEFAULT_SECONDS: u64 = 30;

/// cargo-fuzz's flags for `--sanitizer none`: SanitizerCoverage with
/// inline 8-bit counters, the PC table and comparison tracing, `cfg
/// fuzzing`, and debug assertions and overflow checks left on.
const RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg",
    "fuzzing",
    "-Cdebug-assertions",
    "-Coverflow-checks",
];

#[derive(Debug, PartialEq, Eq)]
struct Options {
    seconds: u64,
    targets: Vec<String>,
    merge: bool,
    /// Passed to every libFuzzer run (after `--`).
    libfuzzer: Vec<String>,
}

const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--target NAME]... [--merge] \
                     [-- LIBFUZZER_FLAGS...]";

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        seconds: DEFAULT_SECONDS,
        targets: Vec::new(),
        merge: false,
        libfuzzer: Vec::new(),
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                let value = args.next().ok_or(USAGE)?;
                options.seconds = value
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("--seconds {value:?}: a whole number above 0"))?;
            }
            "--target" => {
                let name = args.next().ok_or(USAGE)?;
                if !TARGETS.contains(&name.as_str()) {
                    return Err(format!("no fuzz target {name:?}; there are {TARGETS:?}"));
                }
                options.targets.push(name.clone());
            }
            "--merge" => options.merge = true,
            "--" => options.libfuzzer.extend(args.by_ref().cloned()),
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    if options.targets.is_empty() {
        options.targets = TARGETS.iter().map(|t| (*t).to_owned()).collect();
    }
    Ok(options)
}

/// What one run reported (libFuzzer's final stats line and summary).
#[derive(Debug, Default, PartialEq, Eq)]
struct Stats {
    executions: Option<u64>,
    per_second: Option<u64>,
    coverage: Option<u64>,
    features: Option<u64>,
    corpus: Option<String>,
    peak_rss_mb: Option<u64>,
}

fn parse_stats(log: &str) -> Stats {
    let mut stats = Stats::default();
    // The last report wins (a log can hold more than one run's).
    let stat = |name: &str| {
        log.lines()
            .rev()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().parse().ok())
    };
    stats.executions = stat("stat::number_of_executed_units:");
    stats.per_second = stat("stat::average_exec_per_sec:");
    stats.peak_rss_mb = stat("stat::peak_rss_mb:");
    if let Some(line) = log.lines().rev().find(|line| line.contains(" cov: ")) {
        let mut words = line.split_whitespace();
        while let Some(word) = words.next() {
            match word {
                "cov:" => stats.coverage = words.next().and_then(|w| w.parse().ok()),
                "ft:" => stats.features = words.next().and_then(|w| w.parse().ok()),
                "corp:" => stats.corpus = words.next().map(str::to_owned),
                _ => {}
            }
        }
    }
    stats
}

fn target_dir(root: &Path) -> PathBuf {
    crate::cargo_target_dir(root).join("fuzz")
}

fn host_triple() -> Result<String, String> {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("could not run rustc: {e}"))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_owned)
        .ok_or_else(|| "rustc -vV named no host".to_owned())
}

/// Builds every target. `--target` keeps the flags off build scripts and
/// proc macros, which must link without libFuzzer.
fn build(dir: &Path, host: &str) -> Result<(), String> {
    let dir = dir.display().to_string();
    let args = [
        "build",
        "--release",
        "--package",
        "webhook-fuzz",
        "--features",
        "libfuzzer",
        "--bins",
        "--target",
        host,
        "--target-dir",
        &dir,
    ];
    eprintln!(
        "xtask: running RUSTFLAGS=\"{}\" cargo {}",
        RUSTFLAGS.join(" "),
        args.join(" ")
    );
    crate::succeeds(
        Command::new("cargo")
            .args(args)
            .env("RUSTFLAGS", RUSTFLAGS.join(" "))
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            // The release profile's fat LTO and single codegen unit are for
            // the daemon's resident memory; fuzz targets need neither, and
            // they would make this build the slowest step of CI.
            .env("CARGO_PROFILE_RELEASE_LTO", "false")
            .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"),
        "building the fuzz targets",
    )
}

/// Runs `binary` with `args`, its output going to `log`.
fn run_logged(binary: &Path, args: &[String], log: &Path) -> Result<(bool, String), String> {
    let file = fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let status = Command::new(binary)
        .args(args)
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .status()
        .map_err(|e| format!("could not start {}: {e}", binary.display()))?;
    let text = fs::read_to_string(log).unwrap_or_default();
    Ok((status.success(), text))
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default()
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn fuzz_one(
    root: &Path,
    dir: &Path,
    binary: &Path,
    target: &str,
    options: &Options,
) -> Result<Stats, String> {
    let scratch = dir.join("corpus").join(target);
    let artifacts = dir.join("artifacts").join(target);
    for path in [&scratch, &artifacts] {
        fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let seeds = root.join("fuzz").join("corpus").join(target);
    // New inputs go to the scratch corpus (the first directory); the
    // committed one is only read.
    let mut args = vec![scratch.display().to_string()];
    if seeds.is_dir() {
        args.push(seeds.display().to_string());
    }
    args.extend([
        format!("-max_total_time={}", options.seconds),
        format!("-artifact_prefix={}/", artifacts.display()),
        "-timeout=10".to_owned(),
        "-rss_limit_mb=2048".to_owned(),
        "-print_final_stats=1".to_owned(),
    ]);
    let dict = root
        .join("fuzz")
        .join("dicts")
        .join(format!("{target}.dict"));
    if dict.is_file() {
        args.push(format!("-dict={}", dict.display()));
    }
    args.extend(options.libfuzzer.iter().cloned());
    let log = dir.join(format!("{target}.log"));
    eprintln!(
        "xtask: fuzzing `{target}` for {}s (log: {})",
        options.seconds,
        log.display()
    );
    let (passed, text) = run_logged(binary, &args, &log)?;
    if !passed {
        let found: Vec<String> = files_in(&artifacts)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        return Err(format!(
            "fuzz target `{target}` failed; the end of its log:\n{}\n\n\
             failing input(s): {found:?}\n\
             replay one with `{} <file>`; keep it as a regression case in \
             fuzz/regressions/{target}/ (replayed by `cargo test -p webhook-fuzz`)",
            tail(&text, 40),
            binary.display()
        ));
    }
    if options.merge {
        merge(dir, binary, target, &seeds, &scratch)?;
    }
    Ok(parse_stats(&text))
}

/// Replaces `fuzz/corpus/<target>` with the smallest set of inputs (of it
/// and the scratch corpus) that keeps all the coverage they reach.
fn merge(
    dir: &Path,
    binary: &Path,
    target: &str,
    seeds: &Path,
    scratch: &Path,
) -> Result<(), String> {
    let merged = dir.join("merged").join(target);
    let _ = fs::remove_dir_all(&merged);
    fs::create_dir_all(&merged).map_err(|e| format!("{}: {e}", merged.display()))?;
    fs::create_dir_all(seeds).map_err(|e| format!("{}: {e}", seeds.display()))?;
    let args = vec![
        // The greedy set cover: a smaller corpus than `-merge=1` for the
        // same features.
        "-set_cover_merge=1".to_owned(),
        merged.display().to_string(),
        seeds.display().to_string(),
        scratch.display().to_string(),
    ];
    let log = dir.join(format!("{target}.merge.log"));
    let (passed, text) = run_logged(binary, &args, &log)?;
    if !passed {
        return Err(format!("merging `{target}` failed:\n{}", tail(&text, 20)));
    }
    let before = files_in(seeds).len();
    for old in files_in(seeds) {
        fs::remove_file(&old).map_err(|e| format!("{}: {e}", old.display()))?;
    }
    let kept = files_in(&merged);
    for new in &kept {
        if let Some(name) = new.file_name() {
            fs::copy(new, seeds.join(name)).map_err(|e| format!("{}: {e}", new.display()))?;
        }
    }
    eprintln!(
        "xtask: fuzz/corpus/{target}: {} inputs (was {before})",
        kept.len()
    );
    Ok(())
}

fn show(value: Option<u64>) -> String {
    value.map_or_else(|| "?".to_owned(), |v| v.to_string())
}

/// `cargo xtask fuzz [--seconds N] [--target NAME]... [--merge] [-- FLAGS]`.
pub(crate) fn fuzz(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    let root = root();
    let dir = target_dir(&root);
    let host = host_triple()?;
    build(&dir, &host)?;
    let bin_dir = dir.join(&host).join("release");
    let mut report = Vec::new();
    for target in &options.targets {
        let stats = fuzz_one(&root, &dir, &bin_dir.join(target), target, &options)?;
        report.push((target, stats));
    }
    println!(
        "{:<11} {:>8} {:>11} {:>8} {:>6} {:>7} {:>11} {:>7}",
        "target", "seconds", "executions", "exec/s", "cov", "ft", "corpus", "rss MB"
    );
    for (target, stats) in report {
        println!(
            "{:<11} {:>8} {:>11} {:>8} {:>6} {:>7} {:>11} {:>7}",
            target,
            options.seconds,
            show(stats.executions),
            show(stats.per_second),
            show(stats.coverage),
            show(stats.features),
            stats.corpus.as_deref().unwrap_or("?"),
            show(stats.peak_rss_mb),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_default_to_every_target() {
        let options = parse(&[]).expect("valid");
        assert_eq!(options.seconds, DEFAULT_SECONDS);
        assert_eq!(options.targets, TARGETS);
        assert!(!options.merge);
    }

    #[test]
    fn options_are_read() {
        let options = parse(&args(
            "--seconds 600 --target api --merge -- -jobs=1 -seed=7",
        ))
        .expect("valid");
        assert_eq!(
            options,
            Options {
                seconds: 600,
                targets: vec!["api".to_owned()],
                merge: true,
                libfuzzer: args("-jobs=1 -seed=7"),
            }
        );
        assert!(parse(&args("--seconds 0")).is_err());
        assert!(parse(&args("--seconds")).is_err());
        assert!(parse(&args("--target nope")).is_err());
        assert!(parse(&args("--jobs 2")).is_err());
    }

    #[test]
    fn every_target_has_a_source_file() {
        for target in TARGETS {
            let path = root()
                .join("fuzz")
                .join("fuzz_targets")
                .join(format!("{target}.rs"));
            assert!(path.is_file(), "{}", path.display());
        }
    }

    #[test]
    fn libfuzzer_stats_are_read() {
        let log = "INFO: Seed: 1\n\
                   #2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
                   #667988\tDONE   cov: 1024 ft: 3118 corp: 941/48Kb lim: 1490 exec/s: 60726 rss: 29Mb\n\
                   Done 667988 runs in 11 second(s)\n\
                   stat::number_of_executed_units: 667988\n\
                   stat::average_exec_per_sec:     60726\n\
                   stat::new_units_added:          3012\n\
                   stat::slowest_unit_time_sec:    0\n\
                   stat::peak_rss_mb:              36\n";
        assert_eq!(
            parse_stats(log),
            Stats {
                executions: Some(667_988),
                per_second: Some(60_726),
                coverage: Some(1024),
                features: Some(3118),
                corpus: Some("941/48Kb".to_owned()),
                peak_rss_mb: Some(36),
            }
        );
        assert_eq!(parse_stats(""), Stats::default());
    }
}
