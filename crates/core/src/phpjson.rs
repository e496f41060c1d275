//! JSON encoders that reproduce PHP's bytes: `json_encode` (compact, for the
//! `properties` column) and libphutil's `PhutilJSON` pretty form (for the
//! signed payload). Decoding is serde_json's; only encoding differs.
//!
//! PHP decodes JSON objects into arrays, so a value is rendered the way
//! PHP would render the array it became: in the pretty form an empty object
//! is `[]` and an object keyed `"0".."n-1"` in order is a list.

use serde_json::{Map, Value};

/// How strings are escaped: both forms escape `"`, `\`, control characters
/// and every non-ASCII character (as lower-case `\uXXXX`, with surrogate
/// pairs); they differ only in `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slashes {
    /// `json_encode` default: `/` becomes `\/`.
    Escaped,
    /// `JSON_UNESCAPED_SLASHES`.
    Unescaped,
}

/// PHP `json_encode($value)` with default flags (slashes escaped).
pub(crate) fn encode_compact(value: &Value) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}

/// `PhutilJSON::encodeFormatted($object)`: the object pretty-printed with a
/// two-space indent and one trailing newline.
pub(crate) fn encode_pretty_object(object: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_pretty_object(object, 0, &mut out);
    out.push('\n');
    out
}

fn write_compact(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, Slashes::Escaped, out);
                out.push(':');
                write_compact(item, out);
            }
            out.push('}');
        }
        scalar => write_scalar(scalar, Slashes::Escaped, out),
    }
}

fn write_pretty_value(value: &Value, depth: usize, out: &mut String) {
    match value {
        Value::Array(items) => write_pretty_list(items.iter(), items.len(), depth, out),
        Value::Object(map) if map.is_empty() || is_php_list(map) => {
            write_pretty_list(map.values(), map.len(), depth, out)
        }
        Value::Object(map) => write_pretty_object(map, depth, out),
        scalar => write_scalar(scalar, Slashes::Unescaped, out),
    }
}

fn write_pretty_object(map: &Map<String, Value>, depth: usize, out: &mut String) {
    if map.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push_str("{\n");
    for (i, (key, item)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        indent(depth + 1, out);
        write_string(key, Slashes::Unescaped, out);
        out.push_str(": ");
        write_pretty_value(item, depth + 1, out);
    }
    out.push('\n');
    indent(depth, out);
    out.push('}');
}

fn write_pretty_list<'a>(
    items: impl Iterator<Item = &'a Value>,
    len: usize,
    depth: usize,
    out: &mut String,
) {
    if len == 0 {
        out.push_str("[]");
        return;
    }
    out.push_str("[\n");
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        indent(depth + 1, out);
        write_pretty_value(item, depth + 1, out);
    }
    out.push('\n');
    indent(depth, out);
    out.push(']');
}

/// PHP turns the keys `"0"`, `"1"`, … into integers on decode, and an array
/// whose keys are exactly `0..n-1` in order is a list to `PhutilJSON`.
fn is_php_list(map: &Map<String, Value>) -> bool {
    map.keys()
        .enumerate()
        .all(|(i, key)| key.parse::<usize>().ok() == Some(i) && *key == i.to_string())
}

fn indent(depth: usize, out: &mut String) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write_scalar(value: &Value, slashes: Slashes, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(s, slashes, out),
        Value::Array(_) | Value::Object(_) => write_compact(value, out),
    }
}

/// The bytes `json_encode` writes for `ch` inside a string (slashes
/// escaped), as [`write_string`] writes it.
fn compact_escaped_len(ch: char) -> usize {
    match ch {
        '"' | '\\' | '/' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if (c as u32) < 0x20 || (c as u32) > 0x7f => 6 * c.len_utf16(),
        _ => 1,
    }
}

/// The byte length of the longest prefix of `s` (ending on a char
/// boundary) whose `json_encode` string body, quotes excluded, takes at
/// most `budget` bytes; `s.len()` when all of it fits.
pub(crate) fn compact_prefix_within(s: &str, budget: usize) -> usize {
    let mut used = 0usize;
    for (at, ch) in s.char_indices() {
        used += compact_escaped_len(ch);
        if used > budget {
            return at;
        }
    }
    s.len()
}

fn write_string(s: &str, slashes: Slashes, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if slashes == Slashes::Escaped => out.push_str("\\/"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7f => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The length rule the truncation of preserved properties relies on
    /// agrees with the encoder, character class by class.
    #[test]
    fn escaped_lengths_match_the_encoder() {
        for ch in [
            'a',
            '"',
            '\\',
            '/',
            '\u{8}',
            '\u{c}',
            '\n',
            '\r',
            '\t',
            '\u{0}',
            '\u{1f}',
            '\u{7f}',
            '\u{80}',
            '\u{e9}',
            '\u{4e2d}',
            '\u{1F600}',
        ] {
            let mut out = String::new();
            write_string(&ch.to_string(), Slashes::Escaped, &mut out);
            assert_eq!(compact_escaped_len(ch), out.len() - 2, "{ch:?}");
        }
        assert_eq!(compact_prefix_within("ab\u{1}c", 7), 2);
        assert_eq!(compact_prefix_within("ab\u{1}c", 8), 3);
        assert_eq!(compact_prefix_within("ab\u{1}c", 9), 4);
        assert_eq!(compact_prefix_within("\u{e9}\u{e9}", 7), 2);
    }

    #[test]
    fn compact_matches_php_json_encode() {
        let value = json!({"a/b": "x/y", "n": [1, -2, true, null], "e": {}, "l": []});
        assert_eq!(
            encode_compact(&value),
            r#"{"a\/b":"x\/y","n":[1,-2,true,null],"e":{},"l":[]}"#
        );
    }

    #[test]
    fn strings_escape_like_php() {
        let mut out = String::new();
        write_string(
            "\"\\/\u{1}\u{1f}\u{7f}\n\t\u{e9}\u{1F600}<&>",
            Slashes::Escaped,
            &mut out,
        );
        assert_eq!(
            out,
            "\"\\\"\\\\\\/\\u0001\\u001f\u{7f}\\n\\t\\u00e9\\ud83d\\ude00<&>\""
        );
    }

    #[test]
    fn pretty_renders_php_arrays() {
        let Value::Object(object) = json!({
            "empty_object": {},
            "numbered": {"0": "a", "1": "b"},
            "keyed": {"457": "x"},
            "nested": [{"phid": "p"}],
            "slash": "a/b"
        }) else {
            unreachable!()
        };
        let expected = "{\n  \"empty_object\": [],\n  \"numbered\": [\n    \"a\",\n    \"b\"\n  ],\n  \"keyed\": {\n    \"457\": \"x\"\n  },\n  \"nested\": [\n    {\n      \"phid\": \"p\"\n    }\n  ],\n  \"slash\": \"a/b\"\n}\n";
        assert_eq!(encode_pretty_object(&object), expected);
    }

    #[test]
    fn leading_zero_keys_are_not_a_list() {
        let Value::Object(map) = json!({"00": 1}) else {
            unreachable!()
        };
        assert!(!is_php_list(&map));
    }
}
