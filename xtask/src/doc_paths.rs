//! Every file a doc names is in the repository: a tidy test over the
//! Markdown files (the README, docs/, the READMEs beside code) and the
//! comments of deploy/. A path that starts at one of the repository's
//! top-level entries (`deploy/…`, `crates/…`, `Dockerfile`) must exist,
//! relative to the root or to the naming file; a bare file name with an
//! extension of ours (`vector.json`) must be the name of some file in the
//! repository, unless it is one of the few files outside it that the docs
//! name on purpose ([`OUTSIDE`]).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::root;
use crate::tidy::all_files_under;

/// Extensions of files the repository could hold; a bare name with one of
/// them is taken for a file of ours.
const OUR_EXTENSIONS: [&str; 10] = [
    "json", "rs", "md", "toml", "yml", "yaml", "sh", "service", "sql", "py",
];

/// Names with those extensions that the docs use on purpose for something
/// outside the repository, and what each is.
const OUTSIDE: [&str; 5] = [
    // Phorge's settings file, where `bin/config set` writes.
    "local.json",
    // The database server's own systemd units, which the unit orders after.
    "mariadb.service",
    "mysql.service",
    // The receiver's own script in the deduplication example.
    "receiver.py",
    // A field of the contract fixtures, not a file.
    "expect.json",
];

/// The words of `text` that look like paths: runs of path characters.
fn path_like_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "._/-*".contains(c)))
        .map(|word| word.trim_end_matches(['.', '/']))
        .filter(|word| !word.is_empty())
}

fn extension(word: &str) -> Option<&str> {
    let name = word.rsplit('/').next()?;
    let (stem, ext) = name.rsplit_once('.')?;
    (!stem.is_empty()).then_some(ext)
}

/// What `word`, found in `file`, names that is missing; `None` when it
/// names nothing of ours or names something that exists.
fn missing(word: &str, file: &Path, top_level: &HashSet<String>, names: &HashSet<String>) -> bool {
    if word.contains('*')
        || word.starts_with("//")
        || word.contains("..") && !word.starts_with("..")
    {
        return false;
    }
    if word.starts_with("../") {
        return file
            .parent()
            .map(|dir| lexical(&dir.join(word)))
            .is_some_and(|path| path.starts_with(root()) && !path.exists());
    }
    let first = word.split('/').next().unwrap_or(word);
    if word.contains('/') || top_level.contains(word) {
        if !top_level.contains(first) || word.starts_with('/') {
            return false;
        }
        let from_root = root().join(word);
        let from_file = file.parent().map(|dir| dir.join(word));
        return !(from_root.exists() || from_file.is_some_and(|p| p.exists()));
    }
    match extension(word) {
        Some(ext) if OUR_EXTENSIONS.contains(&ext) => {
            !names.contains(word) && !OUTSIDE.contains(&word)
        }
        _ => false,
    }
}

/// `path` with its `..` and `.` steps taken, without asking the file
/// system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn docs_name_only_files_in_the_repository() {
    let root = root();
    let mut all = Vec::new();
    all_files_under(&root, &mut all);
    let names: HashSet<String> = all
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let top_level: HashSet<String> = fs::read_dir(&root)
        .expect("the root is readable")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "target" && name != ".git")
        .collect();
    let docs: Vec<&PathBuf> = all
        .iter()
        .filter(|p| {
            p.extension().is_some_and(|e| e == "md") && !p.starts_with(root.join("fuzz/corpus"))
                || p.starts_with(root.join("deploy"))
        })
        .collect();
    assert!(docs.len() > 10, "only {} docs found", docs.len());
    let mut wrong = Vec::new();
    for doc in docs {
        let Ok(text) = fs::read_to_string(doc) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            for word in path_like_words(line) {
                if missing(word, doc, &top_level, &names) {
                    let shown = doc.strip_prefix(&root).unwrap_or(doc);
                    wrong.push(format!("{}:{}: {word}", shown.display(), number + 1));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs name files that are not in the repository:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_name_of_ours_that_is_not_there_is_found() {
    let top_level: HashSet<String> = ["deploy".to_owned(), "README.md".to_owned()].into();
    let names: HashSet<String> = ["compose.yaml".to_owned()].into();
    let doc = root().join("README.md");
    let found = |word: &str| missing(word, &doc, &top_level, &names);
    assert!(found("vector.json"));
    assert!(found("deploy/no-such-file.yaml"));
    assert!(!found("deploy/compose.yaml"));
    assert!(!found("compose.yaml"));
    assert!(!found("/etc/gorge-webhook/env"));
    assert!(!found("local.json"));
    assert!(!found("example.com"));
    assert!(!found("../../somewhere-outside"));
    let index = root().join("docs/operations.md");
    assert!(missing(
        "../deploy/no-such-file.yaml",
        &index,
        &top_level,
        &names
    ));
    let page = root().join("docs/operations/deploy.md");
    assert!(!missing(
        "../../deploy/compose.yaml",
        &page,
        &top_level,
        &names
    ));
    assert!(missing(
        "../../deploy/compose.yml",
        &page,
        &top_level,
        &names
    ));
}
