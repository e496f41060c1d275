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
/// reached; only the row's orchestrator (`row.rs`) knows their order.
const STAGES: &[&str] = &["prepare", "guard", "claim", "call", "record"];

/// Files of `crates/core/src/dispatch/` that may not be imported by a
/// stage: the other stages, and the files that drive them.
const DRIVERS: &[&str] = &["row", "hook_run", "run_loop"];

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
    let row = imported_siblings(&dispatch_file("row"));
    for stage in STAGES {
        assert!(row.contains(*stage), "row.rs does not import {stage}: {row:?}");
    }
}

/// Every `fn` in `text` with its first line (1-based) and its length in
/// lines, up to its closing brace at the `fn`'s own indent.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let Some(open) = (start..lines.len()).find(|&i| {
            lines[i].contains('{') || lines[i].trim_end().ends_with(';')
        }) else {
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
    assert!(long.is_empty(), "functions over {FUNCTION_LINES_MAX} lines: {long:#?}");
}

#[test]
fn the_length_scan_measures_what_it_says() {
    let text = "impl X {\n    pub(super) async fn a(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n\n    fn b() {}\n}\nfn c();\n";
    assert_eq!(
        functions(text),
        vec![("a".to_owned(), 2, 5), ("b".to_owned(), 8, 1)]
    );
}
