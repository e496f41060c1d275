//! An independent reference for the bytes the daemon must produce, written
//! from protocol §3 and §7 and sharing no code with `webhook_core::phpjson`:
//! what PHP's `json_decode($text, true)` makes of a `properties` text, the
//! signed body `PhutilJSON` prints from it, and the shape-keeping compact
//! form the daemon writes back. The fuzz checks compare the core's bytes
//! with these, byte for byte.
//!
//! Numbers are whole (`i64`) only: floats are outside the reference (see
//! docs/fuzzing.md).

/// A JSON value as written in a text: objects keep their written order and
/// may repeat a key, as a text can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A string.
    Str(String),
    /// `[…]`
    List(Vec<Json>),
    /// `{…}`, keys in written order, repeats allowed.
    Object(Vec<(String, Json)>),
}

/// How a generated text spells its strings; both are valid JSON for the
/// same value, so the parser sees both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// UTF-8 as is; only `"`, `\` and control characters escaped.
    Raw,
    /// As PHP's `json_encode` writes: `\/`, and `\uXXXX` for non-ASCII.
    Php,
}

impl Json {
    /// The value as JSON text, `spaced` putting blanks and line breaks
    /// between tokens.
    pub fn to_text(&self, spelling: Spelling, spaced: bool) -> String {
        let mut out = String::new();
        self.write_text(spelling, spaced, &mut out);
        out
    }

    fn write_text(&self, spelling: Spelling, spaced: bool, out: &mut String) {
        let gap = if spaced { " \n " } else { "" };
        match self {
            Self::Null => out.push_str("null"),
            Self::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Self::Int(n) => out.push_str(&n.to_string()),
            Self::Str(s) => match spelling {
                Spelling::Raw => raw_string(s, out),
                Spelling::Php => php_string(s, true, out),
            },
            Self::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(gap);
                    item.write_text(spelling, spaced, out);
                }
                out.push_str(gap);
                out.push(']');
            }
            Self::Object(entries) => {
                out.push('{');
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(gap);
                    Self::Str(key.clone()).write_text(spelling, spaced, out);
                    out.push_str(gap);
                    out.push(':');
                    out.push_str(gap);
                    value.write_text(spelling, spaced, out);
                }
                out.push_str(gap);
                out.push('}');
            }
        }
    }

    /// The value a JSON parser keeps: a repeated key keeps its first
    /// position and takes its last value (PHP's array assignment, and an
    /// insertion-ordered map's), at every depth.
    pub fn deduplicated(&self) -> Json {
        match self {
            Self::List(items) => Self::List(items.iter().map(Self::deduplicated).collect()),
            Self::Object(entries) => {
                let mut out: Vec<(String, Json)> = Vec::new();
                for (key, value) in entries {
                    let value = value.deduplicated();
                    match out.iter_mut().find(|(k, _)| k == key) {
                        Some(slot) => slot.1 = value,
                        None => out.push((key.clone(), value)),
                    }
                }
                Self::Object(out)
            }
            other => other.clone(),
        }
    }

    /// The deduplicated value stored under `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Self::Object(entries) => entries.iter().rev().find(|(k, _)| k == key).map(|e| &e.1),
            _ => None,
        }
    }

    /// The name `webhook_core::PropertiesError` uses for this value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Bool(_) => "a boolean",
            Self::Int(_) => "a number",
            Self::Str(_) => "a string",
            Self::List(_) => "a list",
            Self::Object(_) => "an object",
        }
    }
}

/// The column the daemon writes back: PHP's `json_encode` spelling (`\/`,
/// `\uXXXX`), compact, with every shape kept as written (protocol §3: a list
/// stays a list, an object an object, even an empty or `"0"`-keyed one).
/// `value` must be deduplicated.
pub fn column(value: &Json) -> String {
    let mut out = String::new();
    write_column(value, &mut out);
    out
}

fn write_column(value: &Json, out: &mut String) {
    match value {
        Json::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_column(item, out);
            }
            out.push(']');
        }
        Json::Object(entries) => {
            out.push('{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                php_string(key, true, out);
                out.push(':');
                write_column(item, out);
            }
            out.push('}');
        }
        scalar => scalar.write_text(Spelling::Php, false, out),
    }
}

/// PHP's `json_encode` of a string: `"` and `\` escaped, `/` as `\/` unless
/// `JSON_UNESCAPED_SLASHES`, the five short escapes, other control
/// characters and every non-ASCII character as lower-case `\uXXXX` (two,
/// a surrogate pair, above U+FFFF); DEL (0x7f) and everything else printable
/// in ASCII as is.
pub fn php_string(s: &str, escape_slashes: bool, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        let code = u32::from(ch);
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if escape_slashes => out.push_str("\\/"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ if code < 0x20 => unicode_escape(code, out),
            _ if code < 0x80 => out.push(ch),
            _ if code < 0x1_0000 => unicode_escape(code, out),
            _ => {
                let offset = code - 0x1_0000;
                unicode_escape(0xd800 + (offset >> 10), out);
                unicode_escape(0xdc00 + (offset & 0x3ff), out);
            }
        }
    }
    out.push('"');
}

fn unicode_escape(unit: u32, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[((unit >> shift) & 0xf) as usize]));
    }
}

/// A minimal valid spelling: only what JSON requires is escaped.
fn raw_string(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => unicode_escape(u32::from(c), out),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What `json_decode($text, true)` gives: every object and list an array
/// of `(key, value)` in order, list keys `"0".."n-1"`. `value` must be
/// deduplicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Php {
    /// A scalar, kept as its JSON.
    Scalar(Json),
    /// An unsigned integer column (`dateCreated`), printed in decimal.
    Unsigned(u64),
    /// An array.
    Array(Vec<(String, Php)>),
}

impl Php {
    /// PHP's view of a (deduplicated) JSON value.
    pub fn from_json(value: &Json) -> Self {
        match value {
            Json::List(items) => Self::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (i.to_string(), Self::from_json(item)))
                    .collect(),
            ),
            Json::Object(entries) => Self::Array(
                entries
                    .iter()
                    .map(|(key, item)| (key.clone(), Self::from_json(item)))
                    .collect(),
            ),
            scalar => Self::Scalar(scalar.clone()),
        }
    }
}

/// `PhutilJSON::encodeFormatted` of one value at `depth`: an array whose
/// keys are exactly 0, 1, … in order (PHP turns a canonical decimal key into
/// an integer) prints as a list, an empty array as `[]`, any other as an
/// object; two spaces per level, `"key": value`, items joined by `,\n`.
fn write_pretty(value: &Php, depth: usize, out: &mut String) {
    let entries = match value {
        Php::Scalar(Json::Str(s)) => return php_string(s, false, out),
        Php::Scalar(scalar) => return scalar.write_text(Spelling::Php, false, out),
        Php::Unsigned(n) => return out.push_str(&n.to_string()),
        Php::Array(entries) => entries,
    };
    if entries.is_empty() {
        out.push_str("[]");
        return;
    }
    let is_list = entries
        .iter()
        .enumerate()
        .all(|(i, (key, _))| *key == i.to_string());
    out.push_str(if is_list { "[\n" } else { "{\n" });
    let inner = "  ".repeat(depth + 1);
    let lines: Vec<String> = entries
        .iter()
        .map(|(key, item)| {
            let mut line = inner.clone();
            if !is_list {
                php_string(key, false, &mut line);
                line.push_str(": ");
            }
            write_pretty(item, depth + 1, &mut line);
            line
        })
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push('\n');
    out.push_str(&"  ".repeat(depth));
    out.push(if is_list { ']' } else { '}' });
}

/// PHP's `phid_get_type`: the four bytes of `^PHID-([^-]{4})-`, else
/// `????`.
pub fn phid_type(phid: &str) -> String {
    let bytes = phid.as_bytes();
    let matched = bytes.len() >= 10
        && &bytes[..5] == b"PHID-"
        && bytes[9] == b'-'
        && bytes[5..9].iter().all(|&b| b != b'-');
    match matched.then(|| std::str::from_utf8(&bytes[5..9])) {
        Some(Ok(code)) => code.to_owned(),
        _ => "????".to_owned(),
    }
}

/// Why a properties value cannot give a payload: the PHID collection under
/// `key` is neither a list, an object nor null.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrongShape {
    /// `transactionPHIDs` or `triggerPHIDs`.
    pub key: &'static str,
    /// The type found, in `PropertiesError`'s words.
    pub found: &'static str,
}

/// The values of a PHID collection, as PHP's `foreach` visits them: those
/// of a list or object in order, none for an absent or null one.
fn collection<'a>(properties: &'a Json, key: &'static str) -> Result<Vec<&'a Json>, WrongShape> {
    match properties.get(key) {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::List(items)) => Ok(items.iter().collect()),
        Some(Json::Object(entries)) => Ok(entries.iter().map(|(_, v)| v).collect()),
        Some(other) => Err(WrongShape {
            key,
            found: other.type_name(),
        }),
    }
}

/// The transactions as Phorge's worker sends them when only the stored
/// shape is known: newest first. An object whose every key PHP would have
/// kept as an integer (a test call's transaction ids) goes by key, highest
/// first; a live edit's PHID-keyed object, or a list, goes in reverse.
fn newest_first(properties: &Json) -> Result<Vec<&Json>, WrongShape> {
    let php_integer = |key: &str| -> Option<i64> {
        let digits = !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit());
        let canonical = digits && (key == "0" || !key.starts_with('0'));
        canonical.then(|| key.parse().ok()).flatten()
    };
    if let Some(Json::Object(entries)) = properties.get("transactionPHIDs") {
        let keyed: Option<Vec<(i64, &Json)>> = entries
            .iter()
            .map(|(key, value)| php_integer(key).map(|id| (id, value)))
            .collect();
        if let Some(mut keyed) = keyed {
            keyed.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
            return Ok(keyed.into_iter().map(|(_, value)| value).collect());
        }
    }
    let mut stored = collection(properties, "transactionPHIDs")?;
    stored.reverse();
    Ok(stored)
}

/// The signed body for a row (protocol §7): `object{type, phid}`,
/// `triggers[{phid}]`, `action{test, silent, secure, epoch}`,
/// `transactions[{phid}]`, pretty-printed, with the trailing newline.
/// `properties` must be a deduplicated object (or an empty list, which PHP
/// writes for an empty property array).
pub fn payload(
    object_phid: &str,
    date_created: u64,
    properties: &Json,
) -> Result<String, WrongShape> {
    let transactions = newest_first(properties)?;
    let triggers = collection(properties, "triggerPHIDs")?;
    let scalar = |json: Json| Php::Scalar(json);
    let phid_list = |phids: Vec<&Json>| {
        Php::Array(
            phids
                .into_iter()
                .enumerate()
                .map(|(i, phid)| {
                    let entry = Php::Array(vec![("phid".to_owned(), Php::from_json(phid))]);
                    (i.to_string(), entry)
                })
                .collect(),
        )
    };
    // `getProperty($key, false)`: the stored value, null included, when the
    // key exists.
    let flag = |key: &str| {
        properties
            .get(key)
            .map_or(Php::Scalar(Json::Bool(false)), Php::from_json)
    };
    let body = Php::Array(vec![
        (
            "object".to_owned(),
            Php::Array(vec![
                ("type".to_owned(), scalar(Json::Str(phid_type(object_phid)))),
                ("phid".to_owned(), scalar(Json::Str(object_phid.to_owned()))),
            ]),
        ),
        ("triggers".to_owned(), phid_list(triggers)),
        (
            "action".to_owned(),
            Php::Array(vec![
                ("test".to_owned(), flag("test")),
                ("silent".to_owned(), flag("silent")),
                ("secure".to_owned(), flag("secure")),
                ("epoch".to_owned(), Php::Unsigned(date_created)),
            ]),
        ),
        ("transactions".to_owned(), phid_list(transactions)),
    ]);
    let mut out = String::new();
    write_pretty(&body, 0, &mut out);
    out.push('\n');
    Ok(out)
}
