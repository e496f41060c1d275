//! Structured inputs from the fuzzer's bytes: strings that reach every
//! escaping branch, PHIDs, bounded JSON trees. Each choice consumes input
//! bytes through `arbitrary::Unstructured`, so libFuzzer's mutations map
//! onto these choices and an exhausted input just ends the generation.

use arbitrary::{Result, Unstructured};

use crate::reference::Json;

/// Pieces that exercise PHP's string escaping: quote, backslash, slash,
/// short and long control escapes, DEL (kept as is), two- and three-byte
/// UTF-8, an astral character (a surrogate pair), U+2028 and HTML
/// characters (not escaped).
const PIECES: &[&str] = &[
    "/",
    "\"",
    "\\",
    "\u{8}",
    "\u{c}",
    "\n",
    "\r",
    "\t",
    "\u{0}",
    "\u{1f}",
    "\u{7f}",
    "\u{e9}",
    "\u{4e2d}",
    "\u{1F600}",
    "\u{10FFFF}",
    "\u{2028}",
    "\u{FFFD}",
    "<&>",
    "-",
    "PHID-",
    "0",
];

/// Keys that mean something in `properties`, and numeric ones that PHP
/// turns into integer keys (or, not canonical, does not).
pub const KEYS: &[&str] = &[
    "retry",
    "transactionPHIDs",
    "triggerPHIDs",
    "silent",
    "test",
    "secure",
    "errorType",
    "errorCode",
    "gorgeOriginalProperties",
    "0",
    "1",
    "2",
    "01",
    "-1",
    "+1",
    "",
];

/// A string: arbitrary text, escaping pieces, or a mix of both.
pub fn string(u: &mut Unstructured<'_>) -> Result<String> {
    let mut out = String::new();
    let parts = u.int_in_range(0..=4)?;
    for _ in 0..parts {
        if u.arbitrary()? {
            out.push_str(u.choose(PIECES)?);
        } else {
            let len = u.int_in_range(0..=12)?;
            for _ in 0..len {
                out.push(u.arbitrary::<char>()?);
            }
        }
    }
    Ok(out)
}

/// A PHID-shaped string (`PHID-` + four characters + `-` + rest), or any
/// string.
pub fn phid(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(1, 4)? {
        return string(u);
    }
    let mut out = String::from("PHID-");
    let kind = u.choose(&[
        "TASK",
        "XACT",
        "HRUL",
        "DREV",
        "CMIT",
        "\u{e9}AB",
        "\u{1F600}",
    ])?;
    if u.ratio(1, 5)? {
        out.push_str(&string(u)?);
    } else {
        out.push_str(kind);
    }
    out.push('-');
    if u.arbitrary()? {
        out.push_str("TASK-");
    }
    out.push_str(&string(u)?);
    Ok(out)
}

/// A key for an object.
pub fn key(u: &mut Unstructured<'_>) -> Result<String> {
    if u.arbitrary()? {
        Ok(u.choose(KEYS)?.to_string())
    } else {
        string(u)
    }
}

/// A JSON value nested at most `depth` levels.
pub fn json(u: &mut Unstructured<'_>, depth: u32) -> Result<Json> {
    let kinds = if depth == 0 { 3 } else { 5 };
    Ok(match u.int_in_range(0..=kinds)? {
        0 => Json::Null,
        1 => Json::Bool(u.arbitrary()?),
        2 => Json::Int(u.arbitrary()?),
        3 => Json::Str(string(u)?),
        4 => {
            let len = u.int_in_range(0..=4)?;
            let mut items = Vec::new();
            for _ in 0..len {
                items.push(json(u, depth - 1)?);
            }
            Json::List(items)
        }
        _ => {
            let len = u.int_in_range(0..=4)?;
            let mut entries = Vec::new();
            for _ in 0..len {
                entries.push((key(u)?, json(u, depth - 1)?));
            }
            Json::Object(entries)
        }
    })
}

/// A PHID collection as PHP stores it: a list, an object keyed by the PHIDs
/// themselves (live edits) or by numbers (test calls), null, or now and
/// then a scalar (which the daemon must refuse).
pub fn collection(u: &mut Unstructured<'_>) -> Result<Json> {
    let len = u.int_in_range(0..=4)?;
    let mut items = Vec::new();
    for _ in 0..len {
        items.push(if u.ratio(1, 6)? {
            json(u, 2)?
        } else {
            Json::Str(phid(u)?)
        });
    }
    Ok(match u.int_in_range(0..=9)? {
        0..=3 => Json::List(items),
        4 | 5 => Json::Object(
            items
                .into_iter()
                .map(|item| match &item {
                    Json::Str(s) => (s.clone(), item),
                    _ => (String::from("x"), item),
                })
                .collect(),
        ),
        6 | 7 => {
            let mut entries = Vec::new();
            for item in items {
                let key = if u.arbitrary()? {
                    u.int_in_range(0..=3u32)?.to_string()
                } else {
                    key(u)?
                };
                entries.push((key, item));
            }
            Json::Object(entries)
        }
        8 => Json::Null,
        _ => json(u, 0)?,
    })
}
