//! Target `payload`: a generated row (object PHID, `dateCreated`, a
//! `properties` tree with flags, triggers and transactions in any shape,
//! spelled raw or PHP-style) goes through `Properties::parse` and
//! `Payload::build`; the body must equal the independent reference
//! (`crate::reference`) byte for byte, and so must the written-back column,
//! before and after `set_error`.

use arbitrary::{Result, Unstructured};
use webhook_core::{
    ErrorCode, ErrorType, LastResult, Payload, Properties, PropertiesError, RequestRow,
    RequestStatus,
};

use crate::gen;
use crate::reference::{self, Json, Spelling};

/// One generated row.
#[derive(Debug)]
struct Row {
    object_phid: String,
    date_created: u64,
    /// As written, repeats and all.
    properties: Json,
    spelling: Spelling,
    spaced: bool,
    error: (ErrorType, ErrorCode),
}

fn row(u: &mut Unstructured<'_>) -> Result<Row> {
    let object_phid = gen::phid(u)?;
    let date_created = if u.arbitrary()? {
        u64::from(u.arbitrary::<u32>()?)
    } else {
        u.arbitrary()?
    };
    let mut entries = Vec::new();
    let count = u.int_in_range(0..=10)?;
    for _ in 0..count {
        let key = gen::key(u)?;
        let value = match key.as_str() {
            "transactionPHIDs" | "triggerPHIDs" => gen::collection(u)?,
            "retry" if u.arbitrary()? => Json::Str(u.choose(&["forever", "never"])?.to_string()),
            "test" | "silent" | "secure" if u.arbitrary()? => Json::Bool(u.arbitrary()?),
            _ => gen::json(u, 3)?,
        };
        entries.push((key, value));
    }
    // PHP writes an empty property array as `[]`.
    let properties = if entries.is_empty() && u.arbitrary()? {
        Json::List(Vec::new())
    } else {
        Json::Object(entries)
    };
    let spelling = if u.arbitrary()? {
        Spelling::Php
    } else {
        Spelling::Raw
    };
    let error = match u.int_in_range(0..=2)? {
        0 => (ErrorType::Http, ErrorCode::Number(u.arbitrary()?)),
        1 => (ErrorType::Timeout, ErrorCode::Number(28)),
        _ => (ErrorType::Hook, ErrorCode::Text(gen::string(u)?)),
    };
    Ok(Row {
        object_phid,
        date_created,
        properties,
        spelling,
        spaced: u.arbitrary()?,
        error,
    })
}

/// Runs the check on the fuzzer's bytes; panics on a mismatch.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(row) = self::row(&mut u) else {
        return;
    };
    check(&row);
}

fn check(input: &Row) {
    let text = input.properties.to_text(input.spelling, input.spaced);
    let value = input.properties.deduplicated();
    let expected = reference::payload(&input.object_phid, input.date_created, &value);
    let parsed = Properties::parse(&text);
    let (mut properties, expected) = match (parsed, expected) {
        (Ok(properties), Ok(body)) => (properties, body),
        (Err(PropertiesError::WrongShape { key, found }), Err(wrong)) => {
            assert_eq!((key, found), (wrong.key, wrong.found), "{text}");
            return;
        }
        (parsed, expected) => {
            panic!("properties {text:?}: parse gave {parsed:?}, the reference expects {expected:?}")
        }
    };

    let row = RequestRow {
        id: 1,
        phid: "PHID-HWBR-fuzz".to_owned(),
        webhook_phid: "PHID-HWBH-fuzz".to_owned(),
        object_phid: input.object_phid.clone(),
        status: RequestStatus::Queued,
        properties: text.clone(),
        last_request_result: LastResult::None,
        last_request_epoch: 0,
        date_created: input.date_created,
        date_modified: input.date_created,
        defect: None,
    };
    let payload = Payload::build(&row, &properties);
    let body = std::str::from_utf8(payload.as_bytes()).expect("the payload is UTF-8");
    if body != expected {
        panic!(
            "payload bytes differ from the reference\nproperties: {text}\n{}",
            first_difference(body, &expected)
        );
    }
    assert!(body.is_ascii(), "the payload must be ASCII: {body:?}");
    let signature = payload.sign("abcdefghijklmnopqrstuvwxyz234567");
    assert!(webhook_core::verify(
        b"abcdefghijklmnopqrstuvwxyz234567",
        payload.as_bytes(),
        &signature
    ));

    let retries = matches!(value.get("retry"), Some(Json::Str(s)) if s == "forever");
    assert_eq!(properties.retries_forever(), retries, "{text}");

    // The column written back keeps every key, order and shape; PHP's `[]`
    // for an empty property array comes back as the empty object `{}`.
    let Json::Object(mut entries) = (match value {
        Json::List(_) => Json::Object(Vec::new()),
        object => object,
    }) else {
        unreachable!("properties are an object or an empty list")
    };
    let column = properties.to_column();
    assert_eq!(
        column,
        reference::column(&Json::Object(entries.clone())),
        "column of {text}"
    );
    assert_eq!(Properties::parse(&column).as_ref(), Ok(&properties));

    // `set_error` changes errorType and errorCode only: in place when they
    // exist, appended (type, then code) when they do not.
    let (error_type, code) = &input.error;
    properties.set_error(*error_type, code);
    let code = match code {
        ErrorCode::Number(n) => Json::Int(*n),
        ErrorCode::Text(s) => Json::Str(s.clone()),
    };
    for (key, new) in [
        ("errorType", Json::Str(error_type.as_str().to_owned())),
        ("errorCode", code),
    ] {
        match entries.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = new,
            None => entries.push((key.to_owned(), new)),
        }
    }
    assert_eq!(
        properties.to_column(),
        reference::column(&Json::Object(entries)),
        "column after set_error({error_type:?}, {:?}) of {text}",
        input.error.1
    );
}

/// The first line where two texts part, with a few lines of context.
fn first_difference(actual: &str, expected: &str) -> String {
    let actual_lines: Vec<&str> = actual.split('\n').collect();
    let expected_lines: Vec<&str> = expected.split('\n').collect();
    let at = actual_lines
        .iter()
        .zip(&expected_lines)
        .position(|(a, e)| a != e)
        .unwrap_or(actual_lines.len().min(expected_lines.len()));
    format!(
        "first difference at line {}:\n  daemon:    {:?}\n  reference: {:?}\n\
         daemon ({} bytes):\n{actual}\nreference ({} bytes):\n{expected}",
        at + 1,
        actual_lines.get(at),
        expected_lines.get(at),
        actual.len(),
        expected.len()
    )
}
