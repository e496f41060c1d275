//! One `GORGE_*` variable described once: its name, its default (as
//! `--help` shows it, and as it is read when the variable is unset), its
//! help line, whether it is a secret, and its parser; and the one error a
//! bad value gives, [`SettingError`], whose message starts with the
//! variable and never echoes the value ([`withheld`]).
//!
//! Each crate declares the variables it reads as [`Setting`] constants
//! and lists them as [`SettingInfo`]s; the daemon composes those lists into
//! its registry. Nothing here reads the process environment: values come
//! through a [`Lookup`].

/// A lookup of one variable by name (the process environment, or a table
/// in tests).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A setting that cannot be used; the message starts with its variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {reason}")]
pub struct SettingError {
    /// The variable.
    pub variable: &'static str,
    /// What is wrong, with what is allowed; never the value itself.
    pub reason: String,
}

impl SettingError {
    /// An error about `variable`.
    pub fn new(variable: &'static str, reason: impl Into<String>) -> Self {
        Self {
            variable,
            reason: reason.into(),
        }
    }
}

/// How an error about a setting describes the value it was given: by its
/// length only. A password pasted into the wrong variable would otherwise
/// be printed at startup, into logs and the service manager's journal, so
/// no setting's text (nor a number parsed from it) is ever echoed.
pub fn withheld(raw: &str) -> String {
    match raw.chars().count() {
        0 => "the value is empty".to_owned(),
        1 => "1 character, not shown".to_owned(),
        n => format!("{n} characters, not shown"),
    }
}

/// One variable and how its text becomes a `T`.
#[derive(Debug, Clone, Copy)]
pub struct Setting<T: 'static> {
    /// The environment variable.
    pub name: &'static str,
    /// The default as `--help` shows it. Unless [`computed`](Self::computed)
    /// is given, an unset variable reads as this text would.
    pub default: &'static str,
    /// What it sets, in one line.
    pub help: &'static str,
    /// Shown only as set or empty, never as its value.
    pub secret: bool,
    /// Text to value; the error is the reason, without the variable.
    pub parse: fn(&str) -> Result<T, String>,
    /// The value of an unset variable, where the default is not a text
    /// (Phorge's deny list, a user agent with the version in it).
    pub computed: Option<fn() -> T>,
}

impl<T> Setting<T> {
    /// A variable whose unset value is its `default` text, parsed.
    pub const fn new(
        name: &'static str,
        default: &'static str,
        help: &'static str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Self {
        Self {
            name,
            default,
            help,
            secret: false,
            parse,
            computed: None,
        }
    }

    /// The same variable, shown only as set or empty.
    pub const fn secret(self) -> Self {
        Self {
            secret: true,
            ..self
        }
    }

    /// The same variable, whose unset value is `value()`; `default` only
    /// describes it.
    pub const fn computed(self, value: fn() -> T) -> Self {
        Self {
            computed: Some(value),
            ..self
        }
    }

    /// The variable through `get`: its default when unset, its parsed text
    /// when set.
    pub fn read(&self, get: Lookup<'_>) -> Result<T, SettingError> {
        match get(self.name) {
            Some(raw) => self.parse_text(&raw),
            None => Ok(self.default_value()),
        }
    }

    /// `text` as if the variable were set to it.
    pub fn parse_text(&self, text: &str) -> Result<T, SettingError> {
        (self.parse)(text).map_err(|reason| SettingError::new(self.name, reason))
    }

    /// The value of the unset variable.
    ///
    /// # Panics
    ///
    /// When the default text does not parse: a mistake in the declaration
    /// (each crate's tests read every default), never a matter of input.
    pub fn default_value(&self) -> T {
        match self.computed {
            Some(value) => value(),
            None => (self.parse)(self.default).unwrap_or_else(|reason| {
                panic!("{}: the default {:?} {reason}", self.name, self.default)
            }),
        }
    }

    /// The description without the type, for listings.
    pub const fn info(&self) -> SettingInfo {
        SettingInfo {
            name: self.name,
            default: self.default,
            help: self.help,
            secret: self.secret,
        }
    }
}

/// A variable as listings show it (`--help`, `webhook-admin config`, the
/// docs check), whatever its type.
#[derive(Debug, Clone, Copy)]
pub struct SettingInfo {
    /// The environment variable.
    pub name: &'static str,
    /// The default as `--help` shows it.
    pub default: &'static str,
    /// What it sets, in one line.
    pub help: &'static str,
    /// Shown only as set or empty.
    pub secret: bool,
}

impl SettingInfo {
    /// The variable's text through `get`, or its default text when unset.
    pub fn text(&self, get: Lookup<'_>) -> String {
        get(self.name).unwrap_or_else(|| self.default.to_owned())
    }

    /// Whether `get` sets the variable.
    pub fn is_set(&self, get: Lookup<'_>) -> bool {
        get(self.name).is_some()
    }
}

/// Parses a whole number, as every numeric variable is read: surrounding
/// blanks are ignored, anything else is refused without being shown.
pub fn whole_number<T: std::str::FromStr>(raw: &str) -> Result<T, String> {
    raw.trim()
        .parse()
        .map_err(|_| format!("is not a whole number ({})", withheld(raw)))
}

/// A whole number of milliseconds.
pub fn milliseconds(raw: &str) -> Result<std::time::Duration, String> {
    whole_number(raw).map(std::time::Duration::from_millis)
}

/// A whole number of seconds.
pub fn seconds(raw: &str) -> Result<std::time::Duration, String> {
    whole_number(raw).map(std::time::Duration::from_secs)
}

/// A switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (empty =
/// off); anything else is refused without being shown.
pub fn switch(raw: &str) -> Result<bool, String> {
    match raw.trim() {
        "" | "0" | "false" | "no" | "off" => Ok(false),
        "1" | "true" | "yes" | "on" => Ok(true),
        other => Err(format!("is not true or false ({})", withheld(other))),
    }
}

/// Takes the text as it is.
pub fn text(raw: &str) -> Result<String, String> {
    Ok(raw.to_owned())
}

/// A lookup over a fixed table of `(variable, value)` pairs, as tests and
/// the fuzz targets feed settings; later pairs win.
pub fn table(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: Setting<u16> = Setting::new("EXAMPLE_PORT", "3306", "a port", whole_number);
    const TOKEN: Setting<String> = Setting::new("EXAMPLE_TOKEN", "", "a token", text).secret();

    #[test]
    fn unset_reads_the_default_text_and_set_reads_the_value() {
        assert_eq!(PORT.read(&|_| None), Ok(3306));
        assert_eq!(PORT.read(&|_| Some(" 80 ".to_owned())), Ok(80));
        assert_eq!(PORT.default_value(), 3306);
        assert!(TOKEN.info().secret && !PORT.info().secret);
    }

    #[test]
    fn errors_name_the_variable_and_withhold_the_value() {
        let err = PORT
            .read(&|_| Some("hunter2".to_owned()))
            .expect_err("refused");
        assert_eq!(err.variable, "EXAMPLE_PORT");
        assert_eq!(
            err.to_string(),
            "EXAMPLE_PORT: is not a whole number (7 characters, not shown)"
        );
    }
}
