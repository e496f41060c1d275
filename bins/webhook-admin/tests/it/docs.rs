//! The docs' `webhook-admin` commands against the binary, so what they
//! show cannot go stale: every command in a ```` ```console ```` block that
//! needs no database or daemon (`sign`, `verify`, `config`, `help`) is run
//! as written, through `sh` in the repository's root with an environment
//! holding nothing but what the line sets, and must print exactly the
//! output shown under it; every other `webhook-admin` command in a
//! console or shell block must name a subcommand and flags that its
//! `--help` lists.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::BIN;

/// Subcommands whose shown output is checked by running them: they read
/// only the line's environment and their input.
const RUN_AS_WRITTEN: [&str; 4] = ["sign", "verify", "config", "help"];

/// One `webhook-admin` command found in a doc.
#[derive(Debug)]
struct Example {
    /// Where: `file:line`.
    place: String,
    /// The command line, continuation lines joined.
    command: String,
    /// The output shown under it (console blocks only).
    shown: Option<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every Markdown file of the repository but the build's and git's.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "corpus") {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The examples of one Markdown text: commands in console, sh and bash
/// blocks (fences may be indented, as in lists).
fn examples(file: &str, text: &str) -> Vec<Example> {
    let mut found = Vec::new();
    let mut fence: Option<(String, usize)> = None;
    let mut lines = text.lines().enumerate().peekable();
    while let Some((number, line)) = lines.next() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(info) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some((info.trim().to_owned(), indent)),
            };
            continue;
        }
        let Some((info, indent)) = &fence else {
            continue;
        };
        let console = info == "console";
        if !(console || info == "sh" || info == "bash") {
            continue;
        }
        let body = line.get(*indent..).unwrap_or(trimmed);
        let mut command = match (console, body.strip_prefix("$ ")) {
            (true, Some(command)) => command.to_owned(),
            (false, _) if !body.trim_start().starts_with('#') => body.trim().to_owned(),
            _ => continue,
        };
        while command.ends_with('\\') {
            command.pop();
            match lines.next() {
                Some((_, next)) => command.push_str(next.trim()),
                None => break,
            }
        }
        let mut shown = Vec::new();
        while let Some((_, next)) = lines.peek().filter(|_| console) {
            let next = next.get(*indent..).unwrap_or("");
            if next.trim_start().starts_with("```") || next.starts_with("$ ") {
                break;
            }
            shown.push(next.to_owned());
            lines.next();
        }
        if command
            .split_whitespace()
            .any(|word| word == "webhook-admin")
        {
            found.push(Example {
                place: format!("{file}:{}", number + 1),
                command,
                shown: console.then(|| shown.join("\n")),
            });
        }
    }
    found
}

/// The words after the first `webhook-admin` up to the end of its own
/// command (a pipe, redirection, `&&` or `;`).
fn arguments(command: &str) -> Vec<&str> {
    invocations(command).into_iter().next().unwrap_or_default()
}

/// The arguments of every `webhook-admin` in `command`, quotes and
/// separators stripped from their ends.
fn invocations(command: &str) -> Vec<Vec<&str>> {
    let mut found = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for raw in command.split_whitespace() {
        let word = raw.trim_matches(|c| c == '\'' || c == '"');
        if word == "webhook-admin" {
            found.extend(current.take());
            current = Some(Vec::new());
            continue;
        }
        let Some(args) = current.as_mut() else {
            continue;
        };
        if matches!(word, "|" | "<" | ">" | "&&" | ";" | "2>&1") {
            found.extend(current.take());
            continue;
        }
        let ends = word.ends_with(';');
        args.push(word.trim_end_matches(';'));
        if ends {
            found.extend(current.take());
        }
    }
    found.extend(current);
    found
}

fn subcommand<'a>(arguments: &[&'a str]) -> Option<&'a str> {
    arguments
        .iter()
        .copied()
        .find(|word| !word.starts_with('-'))
}

/// Runs `command` through `sh` in the repository's root, with
/// `webhook-admin` on `PATH` and no other environment: what it prints
/// (standard output, then standard error), and `[exit status N]` when
/// that is not 0, as the docs show it.
fn run_as_written(command: &str) -> String {
    let bin_dir = Path::new(BIN).parent().expect("the binary's directory");
    let output = Command::new("sh")
        .args(["-c", command])
        .current_dir(repo_root())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .output()
        .expect("run sh");
    let mut printed = String::from_utf8_lossy(&output.stdout).into_owned();
    printed.push_str(&String::from_utf8_lossy(&output.stderr));
    match output.status.code() {
        Some(0) => {}
        Some(code) => printed.push_str(&format!("[exit status {code}]\n")),
        None => printed.push_str("[killed by a signal]\n"),
    }
    printed
}

/// The flags `help` lists: the words of its option lines (those that
/// start with `-`, as `  -h, --help` and `      --json` do), split where
/// a flag's name ends, so a flag named only in prose does not count.
fn help_words(help: &str) -> Vec<&str> {
    help.lines()
        .filter(|line| line.trim_start().starts_with('-'))
        .flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .filter(|word| word.starts_with("--"))
        .collect()
}

fn all_examples() -> Vec<Example> {
    let root = repo_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    files.sort();
    files
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("readable");
            let name = path
                .strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string();
            examples(&name, &text)
        })
        .collect()
}

#[test]
fn shown_outputs_are_what_the_binary_prints() {
    let examples = all_examples();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for example in &examples {
        let args = arguments(&example.command);
        let (Some(shown), Some(sub)) = (&example.shown, subcommand(&args)) else {
            continue;
        };
        if !RUN_AS_WRITTEN.contains(&sub) || args.iter().any(|a| a.starts_with("--url")) {
            continue;
        }
        checked += 1;
        let printed = run_as_written(&example.command);
        if printed.trim_end() != shown.trim_end() {
            wrong.push(format!(
                "{}: `{}`\n--- shown\n{shown}\n--- printed\n{printed}",
                example.place, example.command
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    // The README's sign and verify examples and config's warning at least.
    assert!(checked >= 3, "only {checked} outputs checked");
}

#[test]
fn every_command_in_the_docs_uses_flags_its_help_lists() {
    let examples = all_examples();
    let mut helps: HashMap<String, Option<String>> = HashMap::new();
    let mut wrong = Vec::new();
    for (example, args) in examples
        .iter()
        .flat_map(|e| invocations(&e.command).into_iter().map(move |a| (e, a)))
    {
        let Some(sub) = subcommand(&args) else {
            continue;
        };
        let help = helps.entry(sub.to_owned()).or_insert_with(|| {
            let output = Command::new(BIN)
                .args([sub, "--help"])
                .output()
                .expect("run webhook-admin");
            output
                .status
                .success()
                .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
        });
        let Some(help) = help else {
            wrong.push(format!("{}: no subcommand {sub:?}", example.place));
            continue;
        };
        let words = help_words(help);
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            let name = flag.split('=').next().unwrap_or(flag);
            if !words.contains(&name) {
                wrong.push(format!("{}: {sub} has no {name}", example.place));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        examples.len() >= 10,
        "only {} commands found",
        examples.len()
    );
}

#[test]
fn examples_are_read_from_console_and_shell_blocks() {
    let text = "intro\n\n   ```console\n   $ webhook-admin sign --key k \\\n       < f.json\n   abc\n   $ webhook-admin verify --key k\n   ```\n\n```sh\n# comment\nsudo webhook-admin doctor --json\n```\n";
    let found = examples("x.md", text);
    let seen: Vec<(&str, Option<&str>)> = found
        .iter()
        .map(|e| (e.command.as_str(), e.shown.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("webhook-admin sign --key k < f.json", Some("abc")),
            ("webhook-admin verify --key k", Some("")),
            ("sudo webhook-admin doctor --json", None),
        ]
    );
    assert_eq!(arguments("A=1 webhook-admin config | grep x"), ["config"]);
    assert_eq!(
        help_words(
            "About --prose\n\nOptions:\n      --json  Print JSON\n  -h, --help  Print help\n"
        ),
        ["--json", "--help"]
    );
    assert_eq!(
        invocations("sh -c 'webhook-admin config; webhook-admin doctor --json'"),
        [vec!["config"], vec!["doctor", "--json"]]
    );
}
