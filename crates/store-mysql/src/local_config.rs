//! Phorge's local configuration file, `conf/local/local.json` — where
//! `bin/config set phabricator.silent true` writes the key (Phorge refuses
//! to store it in the database) — as the first [`PhorgeConfig`] source of
//! the core's silent-mode hold (the database entry, `handoff`, is
//! the second), and the `GORGE_PHORGE_LOCAL_CONFIG` setting that names it,
//! parsed once for the daemon and `webhook-admin`. It lives beside the
//! database entry's reader because both are Phorge's configuration as the
//! hand-off reads it.
//!
//! It reads that one file and nothing else: no watching and no caching
//! (`webhook_core::hold::SilentMode` spaces the reads and decides what they add
//! up to). It never writes.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use webhook_core::hold::php_truthy;
use webhook_core::hold::{ConfigUnreadable, PhorgeConfig};
use webhook_core::setting::{Lookup, Setting, SettingError, SettingInfo, Shown};

/// The variable naming Phorge's `conf/local/local.json`: unset or empty is
/// `None`; anything else must be an absolute path (the file itself is only
/// read later, and a missing one is reported then, not refused here).
pub const LOCAL_CONFIG: Setting<Option<LocalConfig>> = Setting::new(
    "GORGE_PHORGE_LOCAL_CONFIG",
    "",
    "Phorge's conf/local/local.json, read for phabricator.silent; empty = not read",
    parse_path,
)
.shown_as(|config| {
    config
        .as_ref()
        .map_or_else(|| "(not set)".to_owned(), Shown::shown)
});

/// The hand-off's variables, in `--help` order.
pub const VARIABLES: &[SettingInfo] = &[LOCAL_CONFIG.info()];

/// The key this crate looks for.
pub const SILENT_KEY: &str = "phabricator.silent";

/// A larger file is not Phorge's local config (and `/dev/zero` would never
/// end).
pub const MAX_BYTES: u64 = 1 << 20;

/// Phorge rewrites the file in place (`file_put_contents`: truncate, then
/// write), so a read can land in between and see an empty or cut-off
/// object; a second read this much later sees the finished file.
const TORN_READ_PAUSE: Duration = Duration::from_millis(50);

/// Why the file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LocalConfigError {
    /// The file does not exist.
    #[error(
        "{} does not exist (Phorge writes it at its first `bin/config set`; \
         `bin/config set phabricator.silent false` creates it)",
        path.display()
    )]
    Missing {
        /// The configured path.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        /// The configured path.
        path: PathBuf,
        /// The operating system's answer.
        cause: std::io::Error,
    },
    /// The file is not a JSON object, as Phorge writes it.
    #[error("{} is not Phorge's local config: {reason}", path.display())]
    Malformed {
        /// The configured path.
        path: PathBuf,
        /// What is wrong with its content.
        reason: String,
    },
}

/// Phorge's `conf/local/local.json`, at a validated path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    path: PathBuf,
}

fn parse_path(raw: &str) -> Result<Option<LocalConfig>, String> {
    if raw.is_empty() {
        return Ok(None);
    }
    let path = PathBuf::from(raw);
    if !path.is_absolute() {
        return Err(
            "is not an absolute path; name Phorge's conf/local/local.json, \
             e.g. /srv/phorge/conf/local/local.json"
                .to_owned(),
        );
    }
    Ok(Some(LocalConfig { path }))
}

/// Its path.
impl Shown for LocalConfig {
    fn shown(&self) -> String {
        self.path.display().to_string()
    }
}

impl LocalConfig {
    /// Reads [`LOCAL_CONFIG`] through `get`.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Option<Self>, SettingError> {
        LOCAL_CONFIG.read(get)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file sets `phabricator.silent` (as PHP reads the value).
    pub async fn silent_mode_now(&self) -> Result<bool, LocalConfigError> {
        match self.read_once().await {
            Err(LocalConfigError::Malformed { .. }) => {
                tokio::time::sleep(TORN_READ_PAUSE).await;
                self.read_once().await
            }
            other => other,
        }
    }

    async fn read_once(&self) -> Result<bool, LocalConfigError> {
        let read_error = |cause: std::io::Error| match cause.kind() {
            ErrorKind::NotFound => LocalConfigError::Missing {
                path: self.path.clone(),
            },
            _ => LocalConfigError::Read {
                path: self.path.clone(),
                cause,
            },
        };
        let file = tokio::fs::File::open(&self.path)
            .await
            .map_err(read_error)?;
        let mut bytes = Vec::new();
        file.take(MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(LocalConfigError::Malformed {
                path: self.path.clone(),
                reason: format!("larger than {MAX_BYTES} bytes"),
            });
        }
        silent_mode_in(&bytes).map_err(|reason| LocalConfigError::Malformed {
            path: self.path.clone(),
            reason,
        })
    }
}

/// `phabricator.silent` in the text of a `local.json`: the file must be one
/// JSON object; a missing key is Phorge's default, off.
pub fn silent_mode_in(text: &[u8]) -> Result<bool, String> {
    let value: Value = serde_json::from_slice(text).map_err(|err| format!("not JSON ({err})"))?;
    let Value::Object(config) = value else {
        return Err("not a JSON object".to_owned());
    };
    Ok(config.get(SILENT_KEY).is_some_and(php_truthy))
}

#[async_trait]
impl PhorgeConfig for LocalConfig {
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable> {
        self.silent_mode_now()
            .await
            .map_err(|err| ConfigUnreadable(err.to_string()))
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::setting::table;

    fn lookup(pairs: &[(&str, &str)]) -> Result<Option<LocalConfig>, SettingError> {
        LocalConfig::from_lookup(&table(pairs))
    }

    #[test]
    fn the_setting_is_optional_and_must_be_absolute() {
        assert_eq!(lookup(&[]).expect("unset"), None);
        assert_eq!(lookup(&[(LOCAL_CONFIG.name, "")]).expect("empty"), None);
        let set = lookup(&[(LOCAL_CONFIG.name, "/srv/phorge/conf/local/local.json")])
            .expect("absolute")
            .expect("set");
        assert_eq!(set.path(), Path::new("/srv/phorge/conf/local/local.json"));
        for bad in ["conf/local/local.json", " /srv/x.json", "local.json"] {
            let err = lookup(&[(LOCAL_CONFIG.name, bad)]).expect_err(bad);
            assert!(err.to_string().starts_with(LOCAL_CONFIG.name), "{err}");
        }
    }

    #[test]
    fn the_key_is_read_as_php_reads_it() {
        for (text, silent) in [
            (r#"{"phabricator.silent": true, "mysql.host": "db"}"#, true),
            (r#"{"phabricator.silent": false}"#, false),
            (r#"{"phabricator.silent": "false"}"#, true),
            (r#"{"phabricator.silent": 0}"#, false),
            (r#"{"phabricator.silent": null}"#, false),
            (r#"{"mysql.host": "db"}"#, false),
            ("{}", false),
            // json_decode keeps the last of duplicate keys.
            (
                r#"{"phabricator.silent": true, "phabricator.silent": false}"#,
                false,
            ),
            ("{\n  \"phabricator.silent\" : true\n}\n", true),
        ] {
            assert_eq!(silent_mode_in(text.as_bytes()), Ok(silent), "{text}");
        }
        for bad in [
            "",
            "{",
            "[]",
            "true",
            "\u{feff}{}",
            "{\"phabricator.silent\": tru}",
        ] {
            assert!(silent_mode_in(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(silent_mode_in(b"{\"a\": \"\xff\"}").is_err(), "not UTF-8");
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "webhook-store-local-config-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    }

    #[tokio::test]
    async fn reads_the_file_and_says_what_is_wrong_with_it() {
        let dir = scratch("read");
        let path = dir.join("local.json");
        let config = LocalConfig { path: path.clone() };
        let missing = config.silent_mode_now().await.expect_err("missing");
        assert!(
            matches!(missing, LocalConfigError::Missing { .. }),
            "{missing}"
        );
        assert!(missing.to_string().contains("bin/config set"), "{missing}");

        std::fs::write(&path, r#"{"phabricator.silent": true}"#).expect("write");
        assert!(config.silent_mode_now().await.expect("readable"));
        std::fs::write(&path, r#"{"phabricator.silent": false}"#).expect("write");
        assert!(!config.silent_mode_now().await.expect("readable"));

        std::fs::write(&path, "{\"phabricator.silent\": tr").expect("write");
        let torn = config.silent_mode_now().await.expect_err("malformed");
        assert!(torn.to_string().contains("not JSON"), "{torn}");
        assert!(torn.to_string().contains(&*path.to_string_lossy()));

        let as_dir = LocalConfig { path: dir.clone() };
        assert!(matches!(
            as_dir.silent_mode_now().await,
            Err(LocalConfigError::Read { .. })
        ));

        std::fs::write(&path, vec![b' '; (MAX_BYTES + 1) as usize]).expect("write");
        let large = config.silent_mode_now().await.expect_err("too large");
        assert!(large.to_string().contains("larger than"), "{large}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
