//! Holding delivery while Phorge is in global silent mode
//! (`phabricator.silent`): Phorge then stops handing requests over and its
//! PHP worker marks each one `failed`/`silent` — but only when that worker
//! runs, so until then the row is `queued` and a poller could send what
//! Phorge meant to keep silent.
//!
//! Phorge keeps the key in `conf/local/local.json` (`bin/config set`) and
//! refuses to store it in the database, so the local config is the source
//! that matters and the database entry a second one. Both come in through
//! [`PhorgeConfig`]; this module reads no file and no table itself.
//!
//! [`SilentMode`] reads the sources at most once per [`CHECK_INTERVAL`],
//! logs each change once, and answers "hold?" from its cached verdict in
//! between. [`Sight`] is the one place that says what the readings add up
//! to, for the daemon and `webhook-admin doctor` alike.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::store::StoreError;

mod sight;

pub use sight::{Reading, Sight, Source, Visibility};

/// How stale the silent-mode verdict may get.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// PHP's `if ($value)` for a value as `json_decode($text, true)` gives it:
/// `false`, `null`, `0`, `0.0`, `""`, `"0"` and an empty array or object
/// are false; everything else (the string `"false"` too) is true.
pub fn php_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(on) => *on,
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i != 0,
            (None, Some(u)) => u != 0,
            (None, None) => n.as_f64().is_some_and(|f| f != 0.0),
        },
        Value::String(s) => !(s.is_empty() || s == "0"),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

/// [`php_truthy`] of a JSON text, as Phorge reads a database-stored value:
/// text that is not JSON decodes to `null`, which is false.
pub fn php_truthy_json(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|value| php_truthy(&value))
}

/// Why one source of Phorge's configuration could not be read, in words for
/// the operator (naming the file or table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigUnreadable(pub String);

impl From<StoreError> for ConfigUnreadable {
    fn from(err: StoreError) -> Self {
        Self(crate::error_chain(&err))
    }
}

/// One place Phorge's configuration is read from.
#[async_trait]
pub trait PhorgeConfig: Send + Sync {
    /// Whether `phabricator.silent` is on here, read as PHP reads it
    /// ([`php_truthy`]); a source without the key says off.
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable>;

    /// Where this source is, as an operator finds it: a file's path, a
    /// table's `database.table` name. The log names it when it cannot be
    /// read.
    fn location(&self) -> String;
}

/// The readings and why each unreadable source was so.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    sight: Sight,
    local_config_error: Option<ConfigUnreadable>,
    database_error: Option<ConfigUnreadable>,
}

impl State {
    fn error(&self, source: Source) -> Option<&ConfigUnreadable> {
        match source {
            Source::LocalConfig => self.local_config_error.as_ref(),
            Source::Database => self.database_error.as_ref(),
        }
    }
}

/// Something a check found that is worth one log line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Notice {
    /// A source became unreadable, or stays so for another reason.
    Unreadable {
        source: Source,
        error: ConfigUnreadable,
        now: Visibility,
    },
    /// A source is readable again.
    Readable { source: Source },
    /// Silent mode seen: holding.
    On { local_config: bool, database: bool },
    /// No source says silent any more: delivering.
    Off,
}

/// The next state from one reading of each source, and what to say about
/// the change; `local_config` is `None` when no path is configured.
fn observe(
    before: &State,
    local_config: Option<Result<bool, ConfigUnreadable>>,
    database: Result<bool, ConfigUnreadable>,
) -> (State, Vec<Notice>) {
    let next = State {
        sight: Sight {
            local_config: local_config.as_ref().map_or(Reading::NotSet, Reading::of),
            database: Reading::of(&database),
        },
        local_config_error: local_config.and_then(Result::err),
        database_error: database.err(),
    };
    let mut notices = Vec::new();
    for source in [Source::LocalConfig, Source::Database] {
        let (was, is) = (before.sight.reading(source), next.sight.reading(source));
        match next.error(source) {
            Some(error) if before.error(source) != Some(error) => {
                notices.push(Notice::Unreadable {
                    source,
                    error: error.clone(),
                    now: next.sight.visibility(),
                });
            }
            None if was == Reading::Unreadable && is.is_visible() => {
                notices.push(Notice::Readable { source });
            }
            _ => {}
        }
    }
    match (before.sight.held(), next.sight.held()) {
        (false, true) => notices.push(Notice::On {
            local_config: next.sight.local_config == Reading::On,
            database: next.sight.database == Reading::On,
        }),
        (true, false) => notices.push(Notice::Off),
        _ => {}
    }
    (next, notices)
}

/// What the log lines name: where each source is
/// ([`PhorgeConfig::location`]), and what delivery does while Phorge is
/// silent.
struct Locations {
    local_config: Option<String>,
    database: String,
    rows_fail: bool,
}

impl Notice {
    fn log(&self, at: &Locations) {
        match self {
            Self::Unreadable { source, error, now } => log_unreadable(*source, error, *now, at),
            Self::Readable { source } => info!(
                event = "silent_mode_visible",
                source = source.label(),
                "Phorge's configuration is readable again"
            ),
            Self::On {
                local_config,
                database,
            } if at.rows_fail => warn!(
                event = "silent_mode_on",
                local_config,
                database,
                "Phorge is in global silent mode (phabricator.silent): each queued row is failed \
                 hook/silent as Phorge's worker fails it, and its task archived, since this \
                 daemon runs Phorge's webhook tasks"
            ),
            Self::On {
                local_config,
                database,
            } => warn!(
                event = "silent_mode_on",
                local_config,
                database,
                "Phorge is in global silent mode (phabricator.silent): claiming nothing; rows stay \
                 queued for Phorge's worker to mark failed/silent"
            ),
            Self::Off => info!(
                event = "silent_mode_off",
                "Phorge left silent mode: delivery resumes"
            ),
        }
    }
}

/// A source became unreadable: which, why, and what that leaves seen.
fn log_unreadable(source: Source, error: &ConfigUnreadable, now: Visibility, at: &Locations) {
    let what = match (source, &at.local_config) {
        (Source::LocalConfig, Some(path)) => format!(
            "cannot read Phorge's local config {path}, where bin/config set keeps \
             phabricator.silent"
        ),
        (Source::LocalConfig, None) => "cannot read Phorge's local config".to_owned(),
        (Source::Database, _) => format!(
            "cannot read Phorge's database configuration {}",
            at.database
        ),
    };
    let local_config = at
        .local_config
        .as_deref()
        .unwrap_or("Phorge's conf/local/local.json");
    let so = match now {
        Visibility::On => "delivery stays held: the other source says silent",
        Visibility::Off => "Phorge's local config is still read",
        Visibility::DatabaseOnly => {
            "only the database entry, which Phorge's tools never write, is seen; delivering"
        }
        Visibility::Invisible | Visibility::Unchecked => &format!(
            "silent mode cannot be seen at all; delivering anyway. Let this daemon read \
             {local_config} (or grant SELECT on {}), or stop it whenever Phorge is silent",
            at.database
        ),
    };
    warn!(event = "silent_mode_invisible", source = source.label(), error = %error,
          "{what}: {so}");
}

/// The cached silent-mode verdict; cheap to ask, refreshed on demand.
pub struct SilentMode {
    database: Arc<dyn PhorgeConfig>,
    local_config: Option<Arc<dyn PhorgeConfig>>,
    held: AtomicBool,
    /// Whether delivery fails rows while silent instead of holding them
    /// (said by the dispatcher, for the log's wording).
    rows_fail: AtomicBool,
    state: Mutex<State>,
    checked_at: Mutex<Option<Duration>>,
}

impl fmt::Debug for SilentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SilentMode")
            .field("sight", &self.sight())
            .finish_non_exhaustive()
    }
}

impl SilentMode {
    /// Watches Phorge's database-stored configuration, with no local config.
    pub fn new(database: Arc<dyn PhorgeConfig>) -> Self {
        Self {
            database,
            local_config: None,
            held: AtomicBool::new(false),
            rows_fail: AtomicBool::new(false),
            state: Mutex::new(State {
                sight: Sight {
                    local_config: Reading::NotSet,
                    database: Reading::Unchecked,
                },
                local_config_error: None,
                database_error: None,
            }),
            checked_at: Mutex::new(None),
        }
    }

    /// Watches Phorge's `conf/local/local.json` too.
    pub fn with_local_config(mut self, local_config: Arc<dyn PhorgeConfig>) -> Self {
        self.local_config = Some(local_config);
        self.lock_state().sight.local_config = Reading::Unchecked;
        self
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Delivery fails each row while Phorge is silent rather than holding
    /// it (a daemon that runs Phorge's webhook tasks): the log says so.
    pub(crate) fn rows_fail_while_silent(&self) {
        self.rows_fail.store(true, Ordering::Relaxed);
    }

    /// The cached verdict: true while delivery must be held.
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// What the last check found, source by source.
    pub fn sight(&self) -> Sight {
        self.lock_state().sight
    }

    /// What the last check found, taken together.
    pub fn visibility(&self) -> Visibility {
        self.sight().visibility()
    }

    /// Re-reads Phorge's configuration when the verdict is older than
    /// [`CHECK_INTERVAL`]; returns whether delivery must be held.
    pub async fn refresh(&self, clock: &dyn Clock) -> bool {
        let now = clock.monotonic();
        {
            let mut checked = self.checked_at.lock().unwrap_or_else(|e| e.into_inner());
            if checked.is_some_and(|at| now.saturating_sub(at) < CHECK_INTERVAL) {
                return self.is_held();
            }
            *checked = Some(now);
        }
        let local_config = match &self.local_config {
            Some(source) => Some(source.silent_mode().await),
            None => None,
        };
        let database = self.database.silent_mode().await;
        let notices = {
            let mut state = self.lock_state();
            let (next, notices) = observe(&state, local_config, database);
            self.held.store(next.sight.held(), Ordering::Relaxed);
            *state = next;
            notices
        };
        if !notices.is_empty() {
            let at = Locations {
                local_config: self.local_config.as_ref().map(|source| source.location()),
                database: self.database.location(),
                rows_fail: self.rows_fail.load(Ordering::Relaxed),
            };
            for notice in &notices {
                notice.log(&at);
            }
        }
        self.is_held()
    }
}

#[cfg(test)]
mod tests;
