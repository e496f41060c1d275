//! The reference encoder is itself checked against protocol §7's vectors, so a
//! payload mismatch points at the daemon, not at the reference.

use webhook_core::vectors;
use webhook_fuzz::reference::{self, Json, Spelling};

fn properties(text: &str) -> Json {
    let value: serde_json::Value = serde_json::from_str(text).expect("vector properties parse");
    to_json(&value)
}

fn to_json(value: &serde_json::Value) -> Json {
    use serde_json::Value;
    match value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => Json::Int(n.as_i64().expect("vectors hold whole numbers")),
        Value::String(s) => Json::Str(s.clone()),
        Value::Array(items) => Json::List(items.iter().map(to_json).collect()),
        Value::Object(map) => Json::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), to_json(item)))
                .collect(),
        ),
    }
}

#[test]
fn the_reference_prints_the_first_vector() {
    let body = reference::payload(
        vectors::OBJECT_PHID,
        vectors::DATE_CREATED,
        &properties(vectors::PROPERTIES),
    )
    .expect("valid shapes");
    assert_eq!(body, vectors::BODY);
    assert_eq!(body.len(), 415);
}

#[test]
fn the_reference_prints_the_escaping_vector() {
    let body = reference::payload(
        vectors::ESCAPING_OBJECT_PHID,
        vectors::ESCAPING_DATE_CREATED,
        &properties(vectors::ESCAPING_PROPERTIES),
    )
    .expect("valid shapes");
    assert_eq!(body, vectors::ESCAPING_BODY);
}

#[test]
fn php_arrays_print_as_php_prints_them() {
    let value = properties(
        r#"{"test":{},"silent":{"0":"a","1":"b"},"secure":{"1":"x","0":"y"},"triggerPHIDs":{"457":"PHID-A","12":"PHID-B"}}"#,
    );
    let body = reference::payload("PHID-TASK-x", 7, &value).expect("valid shapes");
    assert!(body.contains("\"test\": [],\n"), "{body}");
    assert!(
        body.contains("\"silent\": [\n      \"a\",\n      \"b\"\n    ],\n"),
        "{body}"
    );
    assert!(
        body.contains("\"secure\": {\n      \"1\": \"x\",\n      \"0\": \"y\"\n    },\n"),
        "{body}"
    );
    let a = body.find("PHID-A").expect("present");
    let b = body.find("PHID-B").expect("present");
    assert!(a < b, "stored order: {body}");
}

#[test]
fn strings_escape_as_php_json_encode() {
    let mut out = String::new();
    reference::php_string(
        "\"\\/\u{0}\u{1f}\u{7f}\n\u{e9}\u{FFFF}\u{10000}\u{10FFFF}<&>",
        true,
        &mut out,
    );
    assert_eq!(
        out,
        "\"\\\"\\\\\\/\\u0000\\u001f\u{7f}\\n\\u00e9\\uffff\\ud800\\udc00\\udbff\\udfff<&>\""
    );
}

#[test]
fn repeated_keys_keep_the_first_place_and_the_last_value() {
    let written = Json::Object(vec![
        ("a".into(), Json::Int(1)),
        ("b".into(), Json::Null),
        ("a".into(), Json::Str("x/y".into())),
    ]);
    let text = written.to_text(Spelling::Raw, false);
    assert_eq!(text, r#"{"a":1,"b":null,"a":"x/y"}"#);
    let kept = written.deduplicated();
    assert_eq!(reference::column(&kept), r#"{"a":"x\/y","b":null}"#);
    // serde_json (the daemon's parser) agrees.
    let parsed: serde_json::Value = serde_json::from_str(&text).expect("valid");
    assert_eq!(to_json(&parsed), kept);
}

#[test]
fn phid_types_follow_the_byte_regex() {
    assert_eq!(reference::phid_type("PHID-TASK-abc"), "TASK");
    assert_eq!(reference::phid_type("PHID-\u{e9}AB-x"), "\u{e9}AB");
    assert_eq!(reference::phid_type("PHID-\u{e9}A-x"), "????");
    assert_eq!(reference::phid_type("PHID-TA-K-x"), "????");
    assert_eq!(reference::phid_type("PHID-TASK"), "????");
}
