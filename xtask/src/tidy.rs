//! Repository hygiene as ordinary tests (after rust-analyzer's tidy): every
//! Rust file opens with a `//!` header, no unfinished-work markers, and every
//! member manifest takes its versions and lints from the workspace.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn files_under(dir: &Path, extension: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            files_under(&path, extension, out);
        } else if path.extension().is_some_and(|e| e == extension) {
            out.push(path);
        }
    }
}

fn source_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "bins", "xtask", "fuzz"] {
        files_under(&root().join(dir), "rs", &mut files);
    }
    assert!(files.len() > 10, "tidy found too few files: {files:?}");
    files
}

#[test]
fn every_module_has_a_header() {
    let missing: Vec<_> = source_files()
        .into_iter()
        .filter(|path| {
            let text = fs::read_to_string(path).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .collect();
    assert!(
        missing.is_empty(),
        "files without a //! header: {missing:?}"
    );
}

#[test]
fn no_stray_todo_markers() {
    // Split so this file does not flag itself.
    let markers = [
        concat!("TO", "DO"),
        concat!("FIX", "ME"),
        concat!("XX", "X:"),
    ];
    let mut found = Vec::new();
    for path in source_files() {
        let text = fs::read_to_string(&path).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if markers.iter().any(|m| line.contains(m)) {
                found.push(format!("{}:{}", path.display(), n + 1));
            }
        }
    }
    assert!(found.is_empty(), "unfinished work markers: {found:?}");
}

#[test]
fn member_manifests_use_workspace_versions_and_lints() {
    let mut manifests = Vec::new();
    for dir in ["crates", "bins", "xtask"] {
        files_under(&root().join(dir), "toml", &mut manifests);
    }
    let manifests: Vec<_> = manifests
        .into_iter()
        .filter(|p| p.ends_with("Cargo.toml"))
        .collect();
    assert!(manifests.len() >= 6, "{manifests:?}");
    for manifest in manifests {
        let text = fs::read_to_string(&manifest).unwrap_or_default();
        assert!(
            text.contains("[lints]\nworkspace = true"),
            "{} must inherit the workspace lints",
            manifest.display()
        );
        let mut section = "";
        for line in text.lines() {
            if line.starts_with('[') {
                section = line;
                continue;
            }
            let in_deps = section.contains("dependencies");
            if in_deps && line.contains("version =") {
                panic!(
                    "{}: `{line}` pins a version; declare it once in [workspace.dependencies]",
                    manifest.display()
                );
            }
        }
    }
}
