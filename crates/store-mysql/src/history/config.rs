//! The attempt history's settings — `GORGE_WEBHOOK_HISTORY` and its
//! `GORGE_WEBHOOK_HISTORY_*` variables, declared once here and listed in
//! [`VARIABLES`] — and [`HistoryConfig`], what they read as. Nothing here
//! touches the environment or the network.

use std::time::Duration;

use crate::config::NAMESPACE;
use webhook_core::setting::{switch, Bounds, Lookup, Setting, SettingError, SettingInfo, Unit};

/// `GORGE_WEBHOOK_HISTORY`: record every delivery attempt.
pub const HISTORY: Setting<bool> = Setting::new(
    "GORGE_WEBHOOK_HISTORY",
    "false",
    "record every delivery attempt in a database of the daemon's own \
     (GORGE_WEBHOOK_HISTORY_DATABASE), never in Phorge's",
    switch,
);

/// `GORGE_WEBHOOK_HISTORY_DATABASE`: empty = `{namespace}_webhook_history`.
pub const DATABASE: Setting<String> = Setting::new(
    "GORGE_WEBHOOK_HISTORY_DATABASE",
    "",
    "the attempt history's database, created if missing; empty = \
     {namespace}_webhook_history",
    |raw| {
        let raw = raw.trim();
        if raw.is_empty() {
            return Ok(String::new());
        }
        check_database(raw).map(|()| raw.to_owned())
    },
);

/// `GORGE_WEBHOOK_HISTORY_DAYS`: how long an attempt is kept.
pub const DAYS: Setting<u32> = Setting::number(
    "GORGE_WEBHOOK_HISTORY_DAYS",
    "30",
    "days an attempt is kept in the history",
    Bounds::between(1, 3_650, Unit::Count),
);

/// `GORGE_WEBHOOK_HISTORY_MAX_ROWS`: the most attempts kept, the newest.
pub const MAX_ROWS: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_HISTORY_MAX_ROWS",
    "10000000",
    "attempts kept in the history at most (the newest)",
    Bounds::at_least(1_000, Unit::Count),
);

/// `GORGE_WEBHOOK_HISTORY_BODY_BYTES`: response body bytes kept per
/// attempt.
pub const BODY_BYTES: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_HISTORY_BODY_BYTES",
    "4096",
    "bytes of each response body the history keeps",
    Bounds::between(0, 65_536, Unit::Bytes),
);

/// The history's variables, in `--help` order.
pub const VARIABLES: &[SettingInfo] = &[
    HISTORY.info(),
    DATABASE.info(),
    DAYS.info(),
    MAX_ROWS.info(),
    BODY_BYTES.info(),
];

/// MySQL's limit on a database name.
const MAX_DATABASE_NAME: usize = 64;
/// What the default database name adds to the namespace.
const DEFAULT_SUFFIX: &str = "_webhook_history";
const DAY: Duration = Duration::from_secs(86_400);

/// Where and how much the attempt history keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryConfig {
    /// The history's database (letters, digits and `_`, at most 64).
    pub database: String,
    /// Attempts older than this are deleted ([`DAYS`]).
    pub max_age: Duration,
    /// The most attempts kept, the newest ([`MAX_ROWS`]).
    pub max_rows: u64,
    /// Response body bytes kept per attempt ([`BODY_BYTES`]).
    pub body_kept: usize,
}

impl HistoryConfig {
    /// The defaults, on `database`.
    pub fn with_defaults(database: impl Into<String>) -> Self {
        Self {
            database: database.into(),
            max_age: DAY * DAYS.default_value(),
            max_rows: MAX_ROWS.default_value(),
            body_kept: BODY_BYTES.default_value(),
        }
    }

    /// Reads the history's variables through `lookup`; `None` when
    /// [`HISTORY`] is off. Every variable is read either way, so a bad
    /// value stops startup whether or not the history is on (as every
    /// other setting does); only the default database name, derived from
    /// `namespace`, is checked just when it is used. An error names the
    /// variable.
    pub fn from_lookup(lookup: Lookup<'_>, namespace: &str) -> Result<Option<Self>, SettingError> {
        let on = HISTORY.read(lookup)?;
        let named = DATABASE.read(lookup)?;
        let max_age = DAY * DAYS.read(lookup)?;
        let max_rows = MAX_ROWS.read(lookup)?;
        let body_kept = BODY_BYTES.read(lookup)?;
        if !on {
            return Ok(None);
        }
        let database = match named.is_empty() {
            true => Self::database_for(lookup, namespace)?,
            false => named,
        };
        Ok(Some(Self {
            database,
            max_age,
            max_rows,
            body_kept,
        }))
    }

    /// The history's database as [`DATABASE`] names it (or its default,
    /// `{namespace}_webhook_history`), whether or not the history is on:
    /// what the operator's tool reads.
    pub fn database_for(lookup: Lookup<'_>, namespace: &str) -> Result<String, SettingError> {
        let named = DATABASE.read(lookup)?;
        if !named.is_empty() {
            return Ok(named);
        }
        let derived = format!("{namespace}{DEFAULT_SUFFIX}");
        check_database(&derived).map_err(|reason| {
            SettingError::new(
                NAMESPACE.name,
                format!(
                    "gives the attempt history the database name {:?}, which {reason}: \
                     name its database in {}",
                    derived, DATABASE.name
                ),
            )
        })?;
        Ok(derived)
    }

    /// Checks every value, each by its variable's declaration (the values
    /// may have been built in code).
    pub fn validate(&self) -> Result<(), SettingError> {
        check_database(&self.database).map_err(|reason| {
            SettingError::new(
                DATABASE.name,
                format!("{reason} (set to {})", DATABASE.given(&self.database)),
            )
        })?;
        let days = u32::try_from(self.max_age.as_secs().div_ceil(DAY.as_secs())).unwrap_or(0);
        DAYS.check(&days)?;
        MAX_ROWS.check(&self.max_rows)?;
        BODY_BYTES.check(&self.body_kept)
    }
}

/// A database name the history may use, and inline into its statements:
/// ASCII letters, digits and `_`, 1 to 64 of them.
pub(crate) fn check_database(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if name.len() > MAX_DATABASE_NAME {
        return Err(format!("must be at most {MAX_DATABASE_NAME} characters"));
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
    {
        return Err("must hold only ASCII letters, digits and '_'".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::setting::table;

    #[test]
    fn off_by_default_and_defaults_read() {
        for info in VARIABLES {
            assert!(info.shown(&|_| None).is_ok(), "{}", info.name);
        }
        assert_eq!(HistoryConfig::from_lookup(&table(&[]), "phorge"), Ok(None));
        let on = HistoryConfig::from_lookup(&table(&[("GORGE_WEBHOOK_HISTORY", "on")]), "phorge")
            .expect("valid")
            .expect("on");
        assert_eq!(on, HistoryConfig::with_defaults("phorge_webhook_history"));
        assert_eq!(on.max_age, Duration::from_secs(30 * 86_400));
        assert_eq!((on.max_rows, on.body_kept), (10_000_000, 4096));
        assert_eq!(on.validate(), Ok(()));
    }

    #[test]
    fn values_are_read_and_bad_ones_named() {
        let read = |pairs: &[(&str, &str)]| {
            let mut all = vec![("GORGE_WEBHOOK_HISTORY", "1")];
            all.extend_from_slice(pairs);
            HistoryConfig::from_lookup(&table(&all), "ns")
        };
        let set = read(&[
            ("GORGE_WEBHOOK_HISTORY_DATABASE", "hist_1"),
            ("GORGE_WEBHOOK_HISTORY_DAYS", "2"),
            ("GORGE_WEBHOOK_HISTORY_MAX_ROWS", "1000"),
            ("GORGE_WEBHOOK_HISTORY_BODY_BYTES", "0"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(set.database, "hist_1");
        assert_eq!(set.max_age, Duration::from_secs(2 * 86_400));
        assert_eq!((set.max_rows, set.body_kept), (1000, 0));
        for (name, value) in [
            ("GORGE_WEBHOOK_HISTORY", "maybe"),
            ("GORGE_WEBHOOK_HISTORY_DATABASE", "a-b"),
            ("GORGE_WEBHOOK_HISTORY_DATABASE", "a`b"),
            ("GORGE_WEBHOOK_HISTORY_DATABASE", &"x".repeat(65)),
            ("GORGE_WEBHOOK_HISTORY_DAYS", "0"),
            ("GORGE_WEBHOOK_HISTORY_DAYS", "3651"),
            ("GORGE_WEBHOOK_HISTORY_MAX_ROWS", "999"),
            ("GORGE_WEBHOOK_HISTORY_BODY_BYTES", "65537"),
        ] {
            match read(&[(name, value)]) {
                Err(err) => assert_eq!(err.variable, name, "{name}={value}"),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_database_is_named_even_with_the_history_off() {
        assert_eq!(
            HistoryConfig::database_for(&table(&[]), "phorge"),
            Ok("phorge_webhook_history".to_owned())
        );
        let named = table(&[("GORGE_WEBHOOK_HISTORY_DATABASE", " kept ")]);
        assert_eq!(
            HistoryConfig::database_for(&named, "phorge"),
            Ok("kept".to_owned())
        );
        // A namespace whose default name is no valid identifier is the
        // error (the variable set), naming the one to set instead.
        for namespace in ["my-ns", &"n".repeat(57)] {
            let err = HistoryConfig::database_for(&table(&[]), namespace).expect_err(namespace);
            assert_eq!(err.variable, "GORGE_WEBHOOK_NAMESPACE");
            assert!(
                err.reason.contains("GORGE_WEBHOOK_HISTORY_DATABASE"),
                "{err}"
            );
        }
        let bad = HistoryConfig::with_defaults("a.b");
        assert!(bad.validate().is_err());
    }
}
