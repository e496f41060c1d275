//! Phorge's `conf/local/local.json` for tests: a fresh temporary
//! `conf/local/` directory holding the file, rewritten in place as
//! `bin/config set` does (`file_put_contents`: truncate, then write), and
//! removed when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A `local.json` in a directory of its own.
#[derive(Debug)]
pub struct LocalJson {
    root: PathBuf,
    path: PathBuf,
}

impl LocalJson {
    /// A `conf/local/` directory without the file (as before Phorge's
    /// first `bin/config set`).
    pub fn absent() -> Self {
        let root = std::env::temp_dir().join(format!(
            "gorge-local-config-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("conf").join("local");
        std::fs::create_dir_all(&dir).expect("create conf/local");
        Self {
            path: dir.join("local.json"),
            root,
        }
    }

    /// The file with `text` in it.
    pub fn with(text: &str) -> Self {
        let local = Self::absent();
        local.write(text);
        local
    }

    /// The file as `bin/config set phabricator.silent <value>` leaves it
    /// (PhutilJSON's pretty form), next to another key.
    pub fn silent(value: &str) -> Self {
        Self::with(&Self::text(value))
    }

    /// The text of a `local.json` that sets `phabricator.silent` to `value`.
    pub fn text(value: &str) -> String {
        format!("{{\n  \"mysql.host\": \"127.0.0.1\",\n  \"phabricator.silent\": {value}\n}}\n")
    }

    /// Replaces the content in place.
    pub fn write(&self, text: &str) {
        std::fs::write(&self.path, text).expect("write local.json");
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's path as the value of `GORGE_PHORGE_LOCAL_CONFIG`.
    pub fn setting(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

impl Drop for LocalJson {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
