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
        // The driver repeats itself down the chain; its last link is the
        // server's own words ("Table … doesn't exist").
        let mut deepest = std::error::Error::source(&err);
        while let Some(next) = deepest.and_then(std::error::Error::source) {
            deepest = Some(next);
        }
        match deepest {
            Some(cause) => Self(format!("{err}: {cause}")),
            None => Self(err.to_string()),
        }
    }
}

/// One place Phorge's configuration is read from.
#[async_trait]
pub trait PhorgeConfig: Send + Sync {
    /// Whether `phabricator.silent` is on here, read as PHP reads it
    /// ([`php_truthy`]); a source without the key says off.
    async fn silent_mode(&self) -> Result<bool, ConfigUnreadable>;
}

/// Where Phorge may keep `phabricator.silent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `conf/local/local.json`, where `bin/config set` writes it.
    LocalConfig,
    /// `{namespace}_config.config_entry`, which Phorge's tools never write
    /// for this key.
    Database,
}

impl Source {
    /// The name used in logs and metric labels.
    pub fn label(self) -> &'static str {
        match self {
            Self::LocalConfig => "local_config",
            Self::Database => "database",
        }
    }
}

/// What one source showed at the last check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Not configured: no path for Phorge's local config was given.
    NotSet,
    /// Not read yet.
    Unchecked,
    /// Read: `phabricator.silent` is on.
    On,
    /// Read: `phabricator.silent` is off or absent.
    Off,
    /// Could not be read (missing, malformed, no grant).
    Unreadable,
}

impl Reading {
    /// Read at the last check, so silent mode set there would be seen.
    pub fn is_visible(self) -> bool {
        matches!(self, Self::On | Self::Off)
    }

    /// The reading of one answer from a source.
    pub fn of<E>(result: &Result<bool, E>) -> Self {
        match result {
            Ok(true) => Self::On,
            Ok(false) => Self::Off,
            Err(_) => Self::Unreadable,
        }
    }
}

/// What the silent-mode check sees, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Not checked yet.
    Unchecked,
    /// Phorge's local config is read and says off (the database entry says
    /// off too, or cannot be read): delivering.
    Off,
    /// A readable source says on: holding delivery.
    On,
    /// Only the database entry is read, and says off; Phorge's local config
    /// is not set or not readable: delivering, blind to silent mode set
    /// with `bin/config set`.
    DatabaseOnly,
    /// No source can be read: delivering, unable to see silent mode.
    Invisible,
}

/// Both sources' readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sight {
    /// Phorge's `conf/local/local.json`.
    pub local_config: Reading,
    /// Phorge's `config_entry` table.
    pub database: Reading,
}

impl Sight {
    /// Delivery is held when any source that can be read says silent.
    pub fn held(&self) -> bool {
        self.local_config == Reading::On || self.database == Reading::On
    }

    /// What the readings add up to.
    pub fn visibility(&self) -> Visibility {
        if self.held() {
            return Visibility::On;
        }
        match (self.local_config, self.database) {
            (Reading::Off, _) => Visibility::Off,
            (Reading::Unchecked, _) | (_, Reading::Unchecked) => Visibility::Unchecked,
            (_, Reading::Off) => Visibility::DatabaseOnly,
            _ => Visibility::Invisible,
        }
    }

    /// One source's reading.
    pub fn reading(&self, source: Source) -> Reading {
        match source {
            Source::LocalConfig => self.local_config,
            Source::Database => self.database,
        }
    }
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

impl Notice {
    fn log(&self) {
        match self {
            Self::Unreadable { source, error, now } => {
                let what = match source {
                    Source::LocalConfig => {
                        "cannot read Phorge's local config (conf/local/local.json), where \
                         bin/config set keeps phabricator.silent"
                    }
                    Source::Database => {
                        "cannot read Phorge's database configuration \
                         ({namespace}_config.config_entry)"
                    }
                };
                let so = match now {
                    Visibility::On => "delivery stays held: the other source says silent",
                    Visibility::Off => "Phorge's local config is still read",
                    Visibility::DatabaseOnly => {
                        "only the database entry, which Phorge's tools never write, is seen; \
                         delivering"
                    }
                    Visibility::Invisible | Visibility::Unchecked => {
                        "silent mode cannot be seen at all; delivering anyway. Let this daemon \
                         read Phorge's conf/local/local.json (or grant SELECT on \
                         {namespace}_config.config_entry), or stop it whenever Phorge is silent"
                    }
                };
                warn!(event = "silent_mode_invisible", source = source.label(), error = %error,
                      "{what}: {so}");
            }
            Self::Readable { source } => info!(
                event = "silent_mode_visible",
                source = source.label(),
                "Phorge's configuration is readable again"
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

/// The cached silent-mode verdict; cheap to ask, refreshed on demand.
pub struct SilentMode {
    database: Arc<dyn PhorgeConfig>,
    local_config: Option<Arc<dyn PhorgeConfig>>,
    held: AtomicBool,
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
        for notice in &notices {
            notice.log();
        }
        self.is_held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use futures::executor::block_on;
    use serde_json::json;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex as StdMutex;

    /// Answers from a script, one per read; counts the reads.
    struct Scripted(StdMutex<Vec<Result<bool, ConfigUnreadable>>>, AtomicU64);

    impl Scripted {
        fn new(answers: Vec<Result<bool, ConfigUnreadable>>) -> Arc<Self> {
            Arc::new(Self(StdMutex::new(answers), AtomicU64::new(0)))
        }

        fn reads(&self) -> u64 {
            self.1.load(Ordering::Relaxed)
        }
    }

    #[async_trait]
    impl PhorgeConfig for Scripted {
        async fn silent_mode(&self) -> Result<bool, ConfigUnreadable> {
            self.1.fetch_add(1, Ordering::Relaxed);
            let mut answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
            answers.remove(0)
        }
    }

    fn unreadable(why: &str) -> Result<bool, ConfigUnreadable> {
        Err(ConfigUnreadable(why.to_owned()))
    }

    #[test]
    fn php_truthiness() {
        for falsy in [
            json!(false),
            json!(null),
            json!(0),
            json!(-0),
            json!(0.0),
            json!(-0.0),
            json!(""),
            json!("0"),
            json!([]),
            json!({}),
        ] {
            assert!(!php_truthy(&falsy), "{falsy}");
        }
        for truthy in [
            json!(true),
            json!(1),
            json!(-1),
            json!(u64::MAX),
            json!(0.5),
            json!("false"),
            json!("0.0"),
            json!(" "),
            json!("true"),
            json!([false]),
            json!({"a": 0}),
        ] {
            assert!(php_truthy(&truthy), "{truthy}");
        }
        assert!(php_truthy_json(" true\n"));
        assert!(php_truthy_json("1"));
        assert!(
            php_truthy_json("\"true\""),
            "a non-empty string is true in PHP"
        );
        assert!(!php_truthy_json("false"));
        assert!(!php_truthy_json("null"));
        assert!(!php_truthy_json(""), "json_decode('') is null");
        assert!(!php_truthy_json("tru"), "not JSON: null");
    }

    #[test]
    fn any_readable_source_saying_silent_holds_and_only_the_file_counts_as_seeing() {
        use Reading::*;
        use Visibility as V;
        let cases = [
            (On, On, V::On),
            (On, Off, V::On),
            (On, Unreadable, V::On),
            (Off, On, V::On),
            (NotSet, On, V::On),
            (Unreadable, On, V::On),
            (Off, Off, V::Off),
            (Off, Unreadable, V::Off),
            (NotSet, Off, V::DatabaseOnly),
            (Unreadable, Off, V::DatabaseOnly),
            (NotSet, Unreadable, V::Invisible),
            (Unreadable, Unreadable, V::Invisible),
            (NotSet, Unchecked, V::Unchecked),
            (Unchecked, Unchecked, V::Unchecked),
        ];
        for (local_config, database, expected) in cases {
            let sight = Sight {
                local_config,
                database,
            };
            assert_eq!(sight.visibility(), expected, "{sight:?}");
            assert_eq!(sight.held(), expected == V::On, "{sight:?}");
        }
    }

    #[test]
    fn the_database_alone_is_read_at_most_once_per_interval_and_followed() {
        let database = Scripted::new(vec![Ok(false), Ok(true), unreadable("no grant"), Ok(false)]);
        let watch = SilentMode::new(database.clone());
        let clock = ManualClock::new(0);
        assert_eq!(watch.visibility(), Visibility::Unchecked);
        assert!(!block_on(watch.refresh(&clock)));
        assert_eq!(
            watch.visibility(),
            Visibility::DatabaseOnly,
            "off in the database is not 'off'"
        );
        assert!(!block_on(watch.refresh(&clock)), "cached");
        assert_eq!(database.reads(), 1);
        clock.advance(CHECK_INTERVAL);
        assert!(block_on(watch.refresh(&clock)));
        assert!(watch.is_held());
        clock.advance(CHECK_INTERVAL);
        assert!(
            !block_on(watch.refresh(&clock)),
            "unreadable: deliver anyway"
        );
        assert_eq!(watch.visibility(), Visibility::Invisible);
        clock.advance(CHECK_INTERVAL);
        assert!(!block_on(watch.refresh(&clock)));
        assert_eq!(watch.visibility(), Visibility::DatabaseOnly);
        assert_eq!(database.reads(), 4);
    }

    #[test]
    fn the_local_config_holds_on_its_own_and_is_reread_each_interval() {
        let local = Scripted::new(vec![Ok(true), Ok(true), unreadable("malformed"), Ok(false)]);
        let database = Scripted::new(vec![Ok(false); 4]);
        let watch = SilentMode::new(database.clone()).with_local_config(local.clone());
        let clock = ManualClock::new(0);
        assert!(block_on(watch.refresh(&clock)), "the file says silent");
        assert_eq!(
            watch.sight(),
            Sight {
                local_config: Reading::On,
                database: Reading::Off
            }
        );
        clock.advance(CHECK_INTERVAL - Duration::from_millis(1));
        assert!(block_on(watch.refresh(&clock)));
        assert_eq!(local.reads(), 1, "not before the interval is up");
        clock.advance(Duration::from_millis(1));
        assert!(block_on(watch.refresh(&clock)));
        assert_eq!(local.reads(), 2);
        clock.advance(CHECK_INTERVAL);
        assert!(
            !block_on(watch.refresh(&clock)),
            "a file that cannot be read counts as not seen"
        );
        assert_eq!(watch.visibility(), Visibility::DatabaseOnly);
        clock.advance(CHECK_INTERVAL);
        assert!(!block_on(watch.refresh(&clock)));
        assert_eq!(watch.visibility(), Visibility::Off);
        assert_eq!((local.reads(), database.reads()), (4, 4));
    }

    #[test]
    fn the_database_saying_silent_holds_while_the_file_says_off() {
        let local = Scripted::new(vec![Ok(false), Ok(false)]);
        let database = Scripted::new(vec![Ok(true), unreadable("gone")]);
        let watch = SilentMode::new(database).with_local_config(local);
        let clock = ManualClock::new(0);
        assert!(block_on(watch.refresh(&clock)));
        clock.advance(CHECK_INTERVAL);
        assert!(!block_on(watch.refresh(&clock)));
        assert_eq!(watch.visibility(), Visibility::Off);
    }

    fn state(local_config: Reading, database: Reading) -> State {
        State {
            sight: Sight {
                local_config,
                database,
            },
            local_config_error: None,
            database_error: None,
        }
    }

    #[test]
    fn each_change_is_said_once() {
        let start = state(Reading::Unchecked, Reading::Unchecked);
        let (s, said) = observe(&start, Some(unreadable("missing")), Ok(false));
        assert_eq!(
            said,
            [Notice::Unreadable {
                source: Source::LocalConfig,
                error: ConfigUnreadable("missing".into()),
                now: Visibility::DatabaseOnly,
            }]
        );
        let (s, said) = observe(&s, Some(unreadable("missing")), Ok(false));
        assert!(said.is_empty(), "the same failure again: {said:?}");
        let (s, said) = observe(&s, Some(unreadable("malformed")), Ok(false));
        assert!(
            matches!(&said[..], [Notice::Unreadable { error, .. }] if error.0 == "malformed"),
            "another failure is a change: {said:?}"
        );
        let (s, said) = observe(&s, Some(Ok(true)), Ok(false));
        assert_eq!(
            said,
            [
                Notice::Readable {
                    source: Source::LocalConfig
                },
                Notice::On {
                    local_config: true,
                    database: false
                }
            ]
        );
        let (s, said) = observe(&s, Some(Ok(true)), Ok(true));
        assert!(said.is_empty(), "still held: {said:?}");
        let (s, said) = observe(&s, Some(Ok(true)), unreadable("no grant"));
        assert_eq!(
            said,
            [Notice::Unreadable {
                source: Source::Database,
                error: ConfigUnreadable("no grant".into()),
                now: Visibility::On,
            }]
        );
        let (_, said) = observe(&s, Some(Ok(false)), unreadable("no grant"));
        assert_eq!(said, [Notice::Off]);
    }

    #[test]
    fn without_a_local_config_only_the_database_is_talked_about() {
        let start = state(Reading::NotSet, Reading::Unchecked);
        let (s, said) = observe(&start, None, Ok(false));
        assert!(said.is_empty(), "{said:?}");
        let (_, said) = observe(&s, None, unreadable("no grant"));
        assert_eq!(
            said,
            [Notice::Unreadable {
                source: Source::Database,
                error: ConfigUnreadable("no grant".into()),
                now: Visibility::Invisible,
            }]
        );
    }
}
