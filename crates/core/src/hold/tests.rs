//! `SilentMode`'s tests: PHP's truthiness, reading each source at most once
//! per interval, and saying each change once.

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

    fn location(&self) -> String {
        "/srv/phorge/conf/local/local.json".to_owned()
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
