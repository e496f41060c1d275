//! Target `properties`: the fuzzer's bytes are a `properties` column as
//! stored. Whatever they are, nothing panics; text that parses survives
//! `to_column` and a second parse unchanged (value and bytes); `set_error`
//! changes `errorType` and `errorCode` and nothing else; text that does not
//! parse is kept verbatim by `preserving_unparseable`. Floats included: the
//! workspace enables serde_json's `float_roundtrip` (a finding of this
//! target, docs/fuzzing.md#findings).

use serde_json::{Map, Value};
use webhook_core::ORIGINAL_PROPERTIES_KEY;
use webhook_core::{ErrorCode, ErrorType, Properties};

/// Errors written back in the daemon's life: HTTP statuses, cURL numbers,
/// hook error names, and extremes.
fn errors() -> [(ErrorType, ErrorCode); 6] {
    [
        (ErrorType::Http, ErrorCode::Number(200)),
        (ErrorType::Timeout, ErrorCode::Number(28)),
        (ErrorType::Http, ErrorCode::Number(i64::MIN)),
        (
            ErrorType::Hook,
            ErrorCode::Text("invalid-properties".into()),
        ),
        (
            ErrorType::Hook,
            ErrorCode::Text("a/b\"\u{e9}\u{1F600}".into()),
        ),
        (ErrorType::Hook, ErrorCode::Text(String::new())),
    ]
}

/// Runs the check on the fuzzer's bytes; panics when a property fails.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        // The store hands the core text; a column that is not UTF-8 is a
        // row defect handled before properties are looked at.
        return;
    };
    let properties = match Properties::parse(text) {
        Ok(properties) => properties,
        Err(_) => return check_unparseable(text),
    };
    // Accessors never panic, whatever the shapes.
    let _ = properties.transaction_phids();
    let _ = properties.trigger_phids();
    let _ = properties.retries_forever();
    let _ = properties.error();
    for flag in ["test", "silent", "secure"] {
        let _ = properties.flag(flag);
    }

    let column = properties.to_column();
    assert_php_spelling(&column);
    let again = Properties::parse(&column)
        .unwrap_or_else(|e| panic!("to_column gave text that does not parse ({e}): {column}"));
    assert_same(&again, &properties, text);
    assert_eq!(
        again.to_column(),
        column,
        "to_column is not stable for {text:?}"
    );

    let before = as_map(&column);
    for (error_type, code) in errors() {
        let mut changed = properties.clone();
        changed.set_error(error_type, &code);
        let written = changed.to_column();
        assert_php_spelling(&written);
        let after = as_map(&written);
        check_only_error_changed(&before, &after, error_type, &code, text);
        let reread = Properties::parse(&written).expect("written properties parse");
        assert_same(&reread, &changed, text);
        assert_eq!(
            reread.error(),
            (Some(error_type.as_str()), Some(&code_json(&code)))
        );
    }
}

fn check_unparseable(text: &str) {
    let mut kept = Properties::preserving_unparseable(text);
    kept.set_error(
        ErrorType::Hook,
        &ErrorCode::Text("invalid-properties".into()),
    );
    let column = kept.to_column();
    assert_php_spelling(&column);
    let map = as_map(&column);
    assert_eq!(
        map.get(ORIGINAL_PROPERTIES_KEY),
        Some(&Value::from(text)),
        "the original text must be kept verbatim"
    );
    assert!(Properties::parse(&column).is_ok());
}

/// `a` and `b` are equal, floats to the bit.
fn assert_same(a: &Properties, b: &Properties, text: &str) {
    assert!(
        a == b,
        "round trip changed the value of {text:?}:\n  {a:?}\n  {b:?}"
    );
}

fn code_json(code: &ErrorCode) -> Value {
    match code {
        ErrorCode::Number(n) => Value::from(*n),
        ErrorCode::Text(s) => Value::from(s.as_str()),
    }
}

fn as_map(column: &str) -> Map<String, Value> {
    match serde_json::from_str(column) {
        Ok(Value::Object(map)) => map,
        other => panic!("a written column must be a JSON object, got {other:?}: {column}"),
    }
}

/// Every key but the two error keys keeps its value and position; the two
/// keep theirs when present and are appended, type first, when not.
fn check_only_error_changed(
    before: &Map<String, Value>,
    after: &Map<String, Value>,
    error_type: ErrorType,
    code: &ErrorCode,
    text: &str,
) {
    let mut expected: Vec<(&str, Value)> = before
        .iter()
        .map(|(key, value)| (key.as_str(), value.clone()))
        .collect();
    for (key, new) in [
        ("errorType", Value::from(error_type.as_str())),
        ("errorCode", code_json(code)),
    ] {
        match expected.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = new,
            None => expected.push((key, new)),
        }
    }
    let actual: Vec<(&str, Value)> = after
        .iter()
        .map(|(key, value)| (key.as_str(), value.clone()))
        .collect();
    assert_eq!(
        actual, expected,
        "set_error changed more than the error in {text:?}"
    );
}

/// PHP's `json_encode` spelling: ASCII only (non-ASCII as `\uXXXX`) and
/// every `/` escaped.
fn assert_php_spelling(column: &str) {
    assert!(
        column.is_ascii(),
        "non-ASCII in a written column: {column:?}"
    );
    let mut bytes = column.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => {
                bytes.next();
            }
            b'/' => panic!("unescaped / in {column:?}"),
            _ => {}
        }
    }
}
