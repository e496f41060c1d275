//! The code's shape as ordinary tests, so it is kept rather than
//! remembered: the dispatcher's pipeline stages import none of each other,
//! no function of `webhook-core` runs past 60 lines, and the walk of one
//! row that docs/ARCHITECTURE.md gives names files and functions that
//! exist, within the bounds it states.
//!
//! The sources are read as text; a function's length is the lines from
//! its `fn` to its closing brace at the same indent.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::root;

/// The pipeline's stages: each is a function of the value the row has
/// reached; only the row's orchestrator (`hook_run.rs`, `deliver_row`)
/// knows their order.
const STAGES: &[&str] = &["prepare", "guard", "claim", "call", "record"];

/// Files of `crates/core/src/dispatch/` that may not be imported by a
/// stage: the other stages, and the files that drive them.
const DRIVERS: &[&str] = &["hook_run", "run_loop"];

/// The longest a function of `webhook-core` may be.
const FUNCTION_LINES_MAX: usize = 60;

fn dispatch_file(name: &str) -> PathBuf {
    root().join(format!("crates/core/src/dispatch/{name}.rs"))
}

/// The `super::…` modules a dispatch file imports.
fn imported_siblings(path: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("use super::"))
        .flat_map(|rest| {
            let rest = rest.trim_start_matches('{');
            rest.split([',', '{', '}', ';'])
                .map(|part| part.trim().split("::").next().unwrap_or("").to_owned())
                .collect::<Vec<_>>()
        })
        .filter(|module| !module.is_empty())
        .collect()
}

#[test]
fn the_pipeline_stages_import_none_of_each_other() {
    let mut found = Vec::new();
    for stage in STAGES {
        let imports = imported_siblings(&dispatch_file(stage));
        for forbidden in STAGES.iter().chain(DRIVERS) {
            if forbidden != stage && imports.contains(*forbidden) {
                found.push(format!("{stage}.rs imports {forbidden}"));
            }
        }
    }
    assert!(found.is_empty(), "{found:?}");
    // The rule is not vacuous: the orchestrator does import every stage.
    let orchestrator = imported_siblings(&dispatch_file("hook_run"));
    for stage in STAGES {
        assert!(
            orchestrator.contains(*stage),
            "hook_run.rs does not import {stage}: {orchestrator:?}"
        );
    }
}

/// Every `fn` in `text` with its first line (1-based) and its length in
/// lines, up to its closing brace at the `fn`'s own indent.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    fn_spans(text)
}

fn fn_spans(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let Some(open) = (start..lines.len())
            .find(|&i| lines[i].contains('{') || lines[i].trim_end().ends_with(';'))
        else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') && !lines[open].contains('{') {
            continue;
        }
        let close = (open + 1..lines.len()).find(|&i| {
            let l = lines[i];
            l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}')
        });
        let end = if lines[open].trim_end().ends_with('}') {
            open
        } else {
            close.unwrap_or(open)
        };
        found.push((name, start + 1, end - start + 1));
    }
    found
}

/// The name a line declares with `fn`, if it does.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let word = word.trim_end_matches(|c: char| !c.is_alphanumeric() && c != '_');
        match word {
            "pub" | "async" | "const" | "unsafe" | "extern" => continue,
            w if w.starts_with("pub(") => continue,
            "fn" => {
                let name = words.next()?;
                let end = name.find(['(', '<']).unwrap_or(name.len());
                return Some(name[..end].to_owned());
            }
            _ => return None,
        }
    }
    None
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_function_of_the_core_runs_past_sixty_lines() {
    let mut files = Vec::new();
    rust_files(&root().join("crates/core/src"), &mut files);
    assert!(files.len() > 20, "too few core files: {files:?}");
    let mut long = Vec::new();
    let mut seen = 0;
    for path in files {
        let text = fs::read_to_string(&path).unwrap_or_default();
        for (name, line, length) in functions(&text) {
            seen += 1;
            if length > FUNCTION_LINES_MAX {
                long.push(format!("{}:{line} {name} ({length} lines)", path.display()));
            }
        }
    }
    assert!(seen > 300, "the scan found only {seen} functions");
    assert!(
        long.is_empty(),
        "functions over {FUNCTION_LINES_MAX} lines: {long:#?}"
    );
}

#[test]
fn the_length_scan_measures_what_it_says() {
    let text = "impl X {\n    pub(super) async fn a(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n\n    fn b() {}\n}\nfn c();\n";
    assert_eq!(
        functions(text),
        vec![("a".to_owned(), 2, 5), ("b".to_owned(), 8, 1)]
    );
}

/// Where the walk of one row is written down.
const WALK_DOC: &str = "docs/ARCHITECTURE.md";
const WALK_HEADING: &str = "## The walk of one row";
/// The bounds the walk is held to.
const WALK_FILES_MAX: usize = 15;
const WALK_RETURNS_MAX: usize = 5;

/// One row of the walk's table: the file entered and the functions that
/// run there, in order.
#[derive(Debug)]
struct WalkEntry {
    file: String,
    functions: Vec<String>,
}

/// The walk's table, from the architecture document's text.
fn walk_entries(doc: &str) -> Vec<WalkEntry> {
    let section = doc
        .split(WALK_HEADING)
        .nth(1)
        .unwrap_or_else(|| panic!("{WALK_DOC} has no `{WALK_HEADING}` section"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // `| n | file | functions | ports |`
            if cells.len() < 5 || cells[1].parse::<usize>().is_err() {
                return None;
            }
            let file = backticked(cells[2]).into_iter().next()?;
            Some(WalkEntry {
                file,
                functions: backticked(cells[3]),
            })
        })
        .collect()
}

/// The `code` spans of a table cell.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// How many files the walk enters, and how often it enters one it had
/// already left.
fn walk_counts(entries: &[WalkEntry]) -> (usize, usize) {
    let mut seen = BTreeSet::new();
    let mut returns = 0;
    for entry in entries {
        if !seen.insert(entry.file.as_str()) {
            returns += 1;
        }
    }
    (seen.len(), returns)
}

/// The body of function `name` (`Type::name` or `name`) in `text`.
fn body_of<'t>(text: &'t str, name: &str) -> Option<Vec<&'t str>> {
    let bare = name.rsplit("::").next().unwrap_or(name);
    let lines: Vec<&str> = text.lines().collect();
    fn_spans(text)
        .into_iter()
        .find(|(found, _, _)| found == bare)
        .map(|(_, start, length)| lines[start - 1..start - 1 + length].to_vec())
}

#[test]
fn the_walk_of_one_row_is_true_and_short() {
    let doc = fs::read_to_string(root().join(WALK_DOC)).expect("the architecture document");
    let entries = walk_entries(&doc);
    assert!(entries.len() > 10, "the walk has only {entries:?}");
    let core = root().join("crates/core/src");
    let mut walked: Vec<String> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let text = fs::read_to_string(core.join(&entry.file))
            .unwrap_or_else(|e| panic!("walk entry {}: {}: {e}", i + 1, entry.file));
        for (j, function) in entry.functions.iter().enumerate() {
            let body = body_of(&text, function).unwrap_or_else(|| {
                panic!("walk entry {}: no fn {function} in {}", i + 1, entry.file)
            });
            // Each file is entered from a function the walk already went
            // through: the table is a chain of calls, not a list of names.
            if i > 0 && j == 0 {
                let bare = function.rsplit("::").next().unwrap_or(function);
                let called = walked.iter().any(|caller| {
                    caller.contains(&format!("{bare}(")) || caller.contains(&format!("{bare}::<"))
                });
                assert!(
                    called,
                    "walk entry {}: nothing walked before calls {function} ({})",
                    i + 1,
                    entry.file
                );
            }
            walked.push(body.join("\n"));
        }
    }
    let (files, returns) = walk_counts(&entries);
    assert!(files <= WALK_FILES_MAX, "the walk crosses {files} files");
    assert!(
        returns <= WALK_RETURNS_MAX,
        "the walk returns to a file it left {returns} times"
    );
    let stated = format!("{files} files, returns to a file already left {returns} times");
    assert!(
        doc.contains(&stated),
        "{WALK_DOC} should state the walk's counts as \"{stated}\""
    );
}

#[test]
fn the_walk_is_read_as_written() {
    let doc = "## The walk of one row\n\n| # | file | functions | ports |\n|---|---|---|---|\n\
               | 1 | `a.rs` | `A::f`, `g` | |\n| 2 | `b.rs` | `h` | `Store::x` |\n\
               | 3 | `a.rs` | `k` | |\n\n## Next\n| 4 | `c.rs` | `z` | |\n";
    let entries = walk_entries(doc);
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(entries[0].functions, ["A::f", "g"]);
    assert_eq!(walk_counts(&entries), (2, 1));
    let text = "impl A {\n    fn f() {\n        g();\n    }\n}\n";
    assert_eq!(body_of(text, "A::f").map(|b| b.len()), Some(3));
}
