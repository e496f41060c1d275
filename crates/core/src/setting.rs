//! One `GORGE_*` variable described once: its name, its default (as
//! `--help` shows it, and as it is read when the variable is unset), its
//! help line, whether it is a secret, and how its text is read — by a
//! parser, or as a whole number within [`Bounds`] declared with it — and
//! shown; and the one error a bad value gives, [`SettingError`], whose
//! message starts with the variable and shows the text it refused as its
//! declaration allows ([`Setting::given`]: quoted, or a secret's by its
//! length only).
//!
//! A value is checked where its declaration reads it
//! ([`Setting::read`], [`Setting::parse_text`]); [`Setting::check`] holds
//! a value built in code (a test's, the demo's) to the same bounds. Each
//! crate declares the variables it reads as [`Setting`] constants and
//! lists them as [`SettingInfo`]s, which keep the declaration: the daemon
//! composes those lists into its registry, and anything holding the
//! registry can show each variable's value as its own declaration reads
//! it ([`SettingInfo::shown`]). Nothing here reads the process
//! environment: values come through a [`Lookup`].

mod number;
mod shown;

use std::fmt;

pub use number::{Bounds, Unit, WholeNumber, Zero};
pub use shown::Shown;

/// A lookup of one variable by name (the process environment, or a table
/// in tests).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A setting that cannot be used; the message starts with its variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {reason}")]
pub struct SettingError {
    /// The variable.
    pub variable: &'static str,
    /// What is wrong, with what is allowed, and the text refused as its
    /// declaration shows it ([`Setting::given`]).
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

/// A refused text longer than this is shown cut, with its length.
const GIVEN_SHOWN_MAX: usize = 64;

/// How an error about a variable shows a text it was given: a secret's by
/// its length only (it would otherwise land in the log and the service
/// manager's journal), any other quoted as Rust quotes a string (control
/// characters escaped, so the text cannot break or fake a log line), cut
/// after [`GIVEN_SHOWN_MAX`] characters. The operator sees what was read,
/// and so what to fix: a typo, a quote a unit file kept, a stray blank.
fn given(raw: &str, secret: bool) -> String {
    let count = raw.chars().count();
    if secret {
        return match count {
            0 => "an empty value".to_owned(),
            1 => "1 character, not shown".to_owned(),
            n => format!("{n} characters, not shown"),
        };
    }
    if count <= GIVEN_SHOWN_MAX {
        return format!("{raw:?}");
    }
    let head: String = raw.chars().take(GIVEN_SHOWN_MAX).collect();
    format!("{head:?}… ({count} characters)")
}

/// How a variable's text becomes its value, and the value is shown.
enum Reader<T: 'static> {
    /// Any text, through a parser of its own.
    Text {
        parse: fn(&str) -> Result<T, String>,
        show: fn(&T) -> String,
    },
    /// A whole number within its bounds, counted in their unit.
    Number {
        bounds: Bounds,
        from: fn(u64, Unit) -> Option<T>,
        to: fn(&T, Unit) -> Option<u64>,
    },
}

// By hand: fn pointers are `Copy` whatever `T` is.
impl<T> Clone for Reader<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Reader<T> {}

/// One variable and how its text becomes a `T`.
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
    reader: Reader<T>,
    /// The value of an unset variable, where the default is not a text.
    computed: Option<fn() -> T>,
}

impl<T> Clone for Setting<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Setting<T> {}

impl<T> fmt::Debug for Setting<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setting")
            .field("name", &self.name)
            .field("default", &self.default)
            .field("bounds", &self.bounds())
            .finish_non_exhaustive()
    }
}

impl<T> Setting<T> {
    /// A variable read by `parse` (the error is the reason, without the
    /// variable), whose unset value is its `default` text, parsed.
    pub const fn new(
        name: &'static str,
        default: &'static str,
        help: &'static str,
        parse: fn(&str) -> Result<T, String>,
    ) -> Self
    where
        T: Shown,
    {
        Self {
            name,
            default,
            help,
            secret: false,
            reader: Reader::Text {
                parse,
                show: T::shown,
            },
            computed: None,
        }
    }

    /// A whole number within `bounds` (surrounding blanks ignored),
    /// counted in their unit; unset, its `default` text.
    pub const fn number(
        name: &'static str,
        default: &'static str,
        help: &'static str,
        bounds: Bounds,
    ) -> Self
    where
        T: WholeNumber,
    {
        Self {
            name,
            default,
            help,
            secret: false,
            reader: Reader::Number {
                bounds,
                from: T::from_number,
                to: T::to_number,
            },
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

    /// The same text variable, its value shown by `show` in listings.
    ///
    /// # Panics
    ///
    /// On a whole-number setting (at compile time, in a `const`): its
    /// value is shown in its unit.
    pub const fn shown_as(self, show: fn(&T) -> String) -> Self {
        match self.reader {
            Reader::Text { parse, .. } => Self {
                reader: Reader::Text { parse, show },
                ..self
            },
            Reader::Number { .. } => panic!("a whole number is shown in its unit"),
        }
    }

    /// The bounds of a whole-number setting.
    pub const fn bounds(&self) -> Option<Bounds> {
        match self.reader {
            Reader::Number { bounds, .. } => Some(bounds),
            Reader::Text { .. } => None,
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

    /// `text` as if the variable were set to it. A refusal is the one
    /// error a text gives: the parser's reason, then the text as
    /// [`given`](Self::given) shows it.
    pub fn parse_text(&self, text: &str) -> Result<T, SettingError> {
        self.value_of(text, true).map_err(|reason| {
            SettingError::new(self.name, format!("{reason} (set to {})", self.given(text)))
        })
    }

    /// `text`, or a part of it, as an error about this variable shows it:
    /// quoted, or, for a secret, only its length. Parsers never show their
    /// text: [`parse_text`](Self::parse_text) adds it; a check made after
    /// parsing (a list's item) shows what it refuses through this.
    pub fn given(&self, text: &str) -> String {
        given(text, self.secret)
    }

    /// Holds `value`, built in code rather than read, to the declared
    /// bounds, as reading holds a number (a duration finer than the unit
    /// counts as the whole units it takes); a text setting's parser is its
    /// only check, so its values pass.
    pub fn check(&self, value: &T) -> Result<(), SettingError> {
        let Reader::Number { bounds, to, .. } = self.reader else {
            return Ok(());
        };
        match to(value, bounds.unit) {
            Some(n) if bounds.admits(n) => Ok(()),
            _ => Err(SettingError::new(self.name, out_of_bounds(&bounds))),
        }
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
            None => self.value_of(self.default, false).unwrap_or_else(|reason| {
                panic!("{}: the default {:?} {reason}", self.name, self.default)
            }),
        }
    }

    /// `value` as listings show it: in its unit, or as its declaration
    /// shows it.
    pub fn show(&self, value: &T) -> String {
        match self.reader {
            Reader::Text { show, .. } => show(value),
            Reader::Number { bounds, to, .. } => to(value, bounds.unit).map_or_else(
                || "(not a whole number)".to_owned(),
                |n| bounds.unit.show(n),
            ),
        }
    }

    /// The description without the type, for listings; it keeps the
    /// declaration, to read and show the variable's value.
    pub const fn info(&'static self) -> SettingInfo {
        SettingInfo {
            name: self.name,
            default: self.default,
            help: self.help,
            secret: self.secret,
            bounds: self.bounds(),
            declaration: self,
        }
    }

    /// `text` read by the declaration; `zero_reads_default` is off only
    /// for the default text itself.
    fn value_of(&self, text: &str, zero_reads_default: bool) -> Result<T, String> {
        match self.reader {
            Reader::Text { parse, .. } => parse(text),
            Reader::Number { bounds, from, .. } => {
                let n: u64 = whole_number(text)?;
                if n == 0 && bounds.zero == Zero::Default && zero_reads_default {
                    return Ok(self.default_value());
                }
                if !bounds.admits(n) {
                    return Err(out_of_bounds(&bounds));
                }
                from(n, bounds.unit).ok_or_else(|| "is too large".to_owned())
            }
        }
    }
}

/// The one refusal of a number outside its bounds: `must be between 1 and
/// 86400 s`.
fn out_of_bounds(bounds: &Bounds) -> String {
    format!("must be {bounds}")
}

/// A declaration whatever its type: what [`SettingInfo`] keeps to read and
/// show the variable's value.
trait Declared: Sync {
    fn shown(&self, get: Lookup<'_>) -> Result<String, SettingError>;
}

impl<T> Declared for Setting<T> {
    fn shown(&self, get: Lookup<'_>) -> Result<String, SettingError> {
        let value = self.read(get)?;
        if !self.secret {
            return Ok(self.show(&value));
        }
        let text = get(self.name).unwrap_or_else(|| self.default.to_owned());
        Ok(if text.is_empty() {
            "(empty)".to_owned()
        } else {
            "(set, not shown)".to_owned()
        })
    }
}

/// A variable as listings show it (`--help`, `webhook-admin config`, the
/// docs check), whatever its type.
#[derive(Clone, Copy)]
pub struct SettingInfo {
    /// The environment variable.
    pub name: &'static str,
    /// The default as `--help` shows it.
    pub default: &'static str,
    /// What it sets, in one line.
    pub help: &'static str,
    /// Shown only as set or empty.
    pub secret: bool,
    /// What a whole-number setting accepts.
    pub bounds: Option<Bounds>,
    declaration: &'static dyn Declared,
}

impl fmt::Debug for SettingInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettingInfo")
            .field("name", &self.name)
            .field("default", &self.default)
            .field("secret", &self.secret)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
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

    /// The variable's value through `get` as its own declaration reads and
    /// shows it (`30 s`, `(none)`, `X-Phabricator-Webhook-Signature`); a
    /// secret only as `(set, not shown)` or `(empty)`. The error is the
    /// one reading it gives.
    pub fn shown(&self, get: Lookup<'_>) -> Result<String, SettingError> {
        self.declaration.shown(get)
    }

    /// `text`, or a part of it, as an error about this variable shows it
    /// (see [`Setting::given`]).
    pub fn given(&self, text: &str) -> String {
        given(text, self.secret)
    }

    /// What the variable accepts, when that is not any whole number or
    /// left to its parser: `between 1 and 1024`.
    pub fn allowed(&self) -> Option<String> {
        self.bounds
            .filter(|bounds| !bounds.is_open())
            .map(|bounds| bounds.to_string())
    }
}

/// Parses a whole number, as every numeric variable is read: surrounding
/// blanks are ignored, anything else is refused.
pub fn whole_number<T: std::str::FromStr>(raw: &str) -> Result<T, String> {
    raw.trim()
        .parse()
        .map_err(|_| "is not a whole number".to_owned())
}

/// A switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (empty =
/// off); anything else is refused.
pub fn switch(raw: &str) -> Result<bool, String> {
    match raw.trim() {
        "" | "0" | "false" | "no" | "off" => Ok(false),
        "1" | "true" | "yes" | "on" => Ok(true),
        _ => Err("is not true or false (1, true, yes, on or 0, false, no, off)".to_owned()),
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

    const PORT: Setting<u16> = Setting::number(
        "EXAMPLE_PORT",
        "3306",
        "a port",
        Bounds::between(1, 65_535, Unit::Count),
    );
    const TOKEN: Setting<String> = Setting::new("EXAMPLE_TOKEN", "", "a token", text).secret();
    const WAIT: Setting<std::time::Duration> = Setting::number(
        "EXAMPLE_WAIT_MS",
        "250",
        "a wait",
        Bounds::between(10, 60_000, Unit::Millis),
    );
    const POOL: Setting<usize> = Setting::number(
        "EXAMPLE_POOL",
        "16",
        "a pool",
        Bounds::at_least(1, Unit::Count).or_zero(Zero::Default),
    );
    const LIST: Setting<Vec<String>> = Setting::new("EXAMPLE_LIST", "a,b", "a list", |raw| {
        Ok(raw.split(',').map(str::to_owned).collect())
    });

    #[test]
    fn unset_reads_the_default_text_and_set_reads_the_value() {
        assert_eq!(PORT.read(&|_| None), Ok(3306));
        assert_eq!(PORT.read(&|_| Some(" 80 ".to_owned())), Ok(80));
        assert_eq!(PORT.default_value(), 3306);
        assert!(TOKEN.info().secret && !PORT.info().secret);
    }

    /// A secret, a PIN, whose declaration can refuse a text.
    const PIN: Setting<u16> = Setting::number(
        "EXAMPLE_PIN",
        "0",
        "a pin",
        Bounds::at_least(0, Unit::Count),
    )
    .secret();

    #[test]
    fn errors_name_the_variable_and_show_the_text_refused() {
        let err = PORT
            .read(&|_| Some("hunter2".to_owned()))
            .expect_err("refused");
        assert_eq!(err.variable, "EXAMPLE_PORT");
        assert_eq!(
            err.to_string(),
            "EXAMPLE_PORT: is not a whole number (set to \"hunter2\")"
        );
        // Control characters cannot break the line; a long text is cut.
        let err = PORT.parse_text("80\n\u{1b}[2J").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "EXAMPLE_PORT: is not a whole number (set to \"80\\n\\u{1b}[2J\")"
        );
        let long = "9".repeat(100);
        let err = PORT.parse_text(&long).expect_err("refused");
        assert!(
            err.to_string().ends_with(&format!(
                "(set to \"{}\"… (100 characters))",
                "9".repeat(64)
            )),
            "{err}"
        );
    }

    #[test]
    fn a_secrets_refused_text_is_shown_by_its_length_only() {
        for (text, shown) in [
            ("hunter2", "7 characters, not shown"),
            ("x", "1 character, not shown"),
            ("", "an empty value"),
        ] {
            let err = PIN.parse_text(text).expect_err(text);
            assert_eq!(
                err.to_string(),
                format!("EXAMPLE_PIN: is not a whole number (set to {shown})")
            );
        }
        assert_eq!(PIN.given("1234"), "4 characters, not shown");
        assert_eq!(PIN.info().given("1234"), "4 characters, not shown");
        assert_eq!(PORT.info().given("12 34"), "\"12 34\"");
    }

    #[test]
    fn a_number_out_of_its_bounds_is_refused_naming_the_variable_and_the_bound() {
        for (raw, message) in [
            (
                "0",
                "EXAMPLE_PORT: must be between 1 and 65535 (set to \"0\")",
            ),
            (
                "65536",
                "EXAMPLE_PORT: must be between 1 and 65535 (set to \"65536\")",
            ),
        ] {
            let err = PORT.parse_text(raw).expect_err(raw);
            assert_eq!(err.to_string(), message);
        }
        let err = WAIT.parse_text("9").expect_err("below");
        assert_eq!(
            err.to_string(),
            "EXAMPLE_WAIT_MS: must be between 10 and 60000 ms (set to \"9\")"
        );
        assert_eq!(
            WAIT.parse_text("60000"),
            Ok(std::time::Duration::from_secs(60))
        );
    }

    #[test]
    fn a_value_built_in_code_meets_the_same_bounds() {
        assert_eq!(PORT.check(&3306), Ok(()));
        let err = PORT.check(&0).expect_err("0");
        assert_eq!(err.to_string(), "EXAMPLE_PORT: must be between 1 and 65535");
        let finer = std::time::Duration::from_micros(9_500);
        assert_eq!(WAIT.check(&finer), Ok(()), "10 ms, rounded up");
        let err = WAIT.check(&std::time::Duration::ZERO).expect_err("0");
        assert_eq!(
            err.to_string(),
            "EXAMPLE_WAIT_MS: must be between 10 and 60000 ms"
        );
        assert_eq!(LIST.check(&Vec::new()), Ok(()), "text: its parser checks");
    }

    #[test]
    fn zero_can_read_as_the_default() {
        assert_eq!(POOL.parse_text("0"), Ok(16));
        assert_eq!(POOL.parse_text(" 3 "), Ok(3));
        assert!(POOL.check(&0).is_err(), "0 is no pool size");
        assert_eq!(
            POOL.info().allowed().as_deref(),
            Some("0 (the default) or at least 1")
        );
    }

    #[test]
    fn listings_show_the_value_as_the_declaration_reads_it() {
        let set = table(&[
            ("EXAMPLE_WAIT_MS", " 1500 "),
            ("EXAMPLE_TOKEN", "hunter2"),
            ("EXAMPLE_LIST", "x,y"),
        ]);
        let shown = |info: SettingInfo| info.shown(&set).expect("valid");
        assert_eq!(shown(WAIT.info()), "1500 ms");
        assert_eq!(shown(PORT.info()), "3306");
        assert_eq!(shown(TOKEN.info()), "(set, not shown)");
        assert_eq!(shown(LIST.info()), "x, y");
        assert_eq!(TOKEN.info().shown(&|_| None), Ok("(empty)".to_owned()));
        let refused = WAIT.info().shown(&table(&[("EXAMPLE_WAIT_MS", "1")]));
        assert!(refused.is_err_and(|e| e.variable == "EXAMPLE_WAIT_MS"));
        assert_eq!(
            WAIT.info().allowed().as_deref(),
            Some("between 10 and 60000 ms")
        );
        assert_eq!(LIST.info().allowed(), None);
    }
}
