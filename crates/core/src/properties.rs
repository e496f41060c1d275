//! The `properties` column: a JSON object written by PHP that must survive a
//! round trip through the daemon. Unknown keys, key order and value shapes
//! are kept; only `errorType` and `errorCode` are ever changed.

use serde_json::{Map, Value};

use crate::phpjson;

/// Key under which the text of unparseable properties is kept when the row
/// is marked failed, so the original is never destroyed.
pub const ORIGINAL_PROPERTIES_KEY: &str = "gorgeOriginalProperties";

/// Key added beside [`ORIGINAL_PROPERTIES_KEY`] when the kept text had to be
/// cut to fit [`ORIGINAL_PROPERTIES_ENCODED_MAX`]: the original's length in
/// bytes, as a JSON integer.
pub const ORIGINAL_PROPERTIES_TRUNCATED_KEY: &str = "gorgeOriginalPropertiesTruncated";

/// At most this many bytes of encoded JSON string (quotes excluded) hold
/// the kept original. `json_encode` writes a control character as six
/// bytes, so 3 MB of them became 18 MB, more than MySQL's default
/// `max_allowed_packet` (16 MiB) lets through, and the write-back failed
/// for ever; 1 MiB stays far below it.
pub const ORIGINAL_PROPERTIES_ENCODED_MAX: usize = 1 << 20;

/// Why a `properties` column cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropertiesError {
    /// The text is not JSON at all.
    #[error("properties are not valid JSON: {0}")]
    NotJson(String),
    /// Valid JSON, but not an object (PHP would not get a property map).
    #[error("properties are JSON but not an object (found {0})")]
    NotAnObject(&'static str),
    /// A key the payload needs holds a shape PHP could not iterate.
    #[error("properties key {key:?} must be a list or an object of PHIDs (found {found})")]
    WrongShape {
        /// The offending key.
        key: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
}

/// `properties.errorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// A hook-configuration problem; no HTTP attempt was made.
    Hook,
    /// An HTTP response or a transport error.
    Http,
    /// The whole exchange ran out of time.
    Timeout,
}

impl ErrorType {
    /// The string Phorge stores.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hook => "hook",
            Self::Http => "http",
            Self::Timeout => "timeout",
        }
    }
}

/// `properties.errorCode`: PHP stores an integer for `http`/`timeout` and a
/// string for `hook` errors, and both shapes must be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    /// HTTP status or cURL error number.
    Number(i64),
    /// Hook error name (`disabled`, `uri`, …).
    Text(String),
}

impl ErrorCode {
    fn to_json(&self) -> Value {
        match self {
            Self::Number(n) => Value::from(*n),
            Self::Text(s) => Value::from(s.as_str()),
        }
    }
}

/// A parsed `properties` object, in stored key order.
#[derive(Debug, Clone, PartialEq)]
pub struct Properties {
    map: Map<String, Value>,
}

impl Properties {
    /// Parses the column. An empty JSON list (`[]`, which is how PHP's
    /// `json_encode` writes an empty property array) is an empty object.
    pub fn parse(text: &str) -> Result<Self, PropertiesError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| PropertiesError::NotJson(e.to_string()))?;
        let map = match value {
            Value::Object(map) => map,
            Value::Array(items) if items.is_empty() => Map::new(),
            other => return Err(PropertiesError::NotAnObject(json_type(&other))),
        };
        let properties = Self { map };
        for key in ["transactionPHIDs", "triggerPHIDs"] {
            properties.check_phid_collection(key)?;
        }
        Ok(properties)
    }

    /// Properties to write for a row whose stored text could not be parsed:
    /// the original text is kept under [`ORIGINAL_PROPERTIES_KEY`],
    /// verbatim when its encoding fits 1 MiB, else its longest prefix that
    /// does (cut on a character boundary) with the original's byte length
    /// under `gorgeOriginalPropertiesTruncated`: a write the server refuses
    /// would keep nothing and retry the row for ever.
    pub fn preserving_unparseable(original: &str) -> Self {
        let kept = phpjson::compact_prefix_within(original, ORIGINAL_PROPERTIES_ENCODED_MAX);
        let mut map = Map::new();
        map.insert(
            ORIGINAL_PROPERTIES_KEY.to_owned(),
            Value::from(&original[..kept]),
        );
        if kept < original.len() {
            map.insert(
                ORIGINAL_PROPERTIES_TRUNCATED_KEY.to_owned(),
                Value::from(original.len()),
            );
        }
        Self { map }
    }

    /// True only when `retry` is exactly the string `forever`.
    pub fn retries_forever(&self) -> bool {
        self.map.get("retry").and_then(Value::as_str) == Some("forever")
    }

    /// Transaction PHIDs newest first, as Phorge's worker sends them, judged
    /// from the stored shape alone (for when the object's transactions
    /// cannot be read): an object keyed by transaction ids (a test call's)
    /// by id descending; any other object (a live edit's, keyed by PHID, in
    /// the order the edit applied them) or a list, reversed.
    pub fn transaction_phids(&self) -> Vec<&Value> {
        match self.map.get("transactionPHIDs") {
            Some(Value::Object(map)) => {
                let ids: Option<Vec<i64>> = map.keys().map(|key| transaction_id(key)).collect();
                match ids {
                    Some(ids) => {
                        let mut by_id: Vec<(i64, &Value)> =
                            ids.into_iter().zip(map.values()).collect();
                        by_id.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
                        by_id.into_iter().map(|(_, phid)| phid).collect()
                    }
                    None => map.values().rev().collect(),
                }
            }
            Some(Value::Array(items)) => items.iter().rev().collect(),
            _ => Vec::new(),
        }
    }

    /// The listed transaction PHIDs that are strings, in stored order: what
    /// the worker asks the object's transaction table for.
    pub fn listed_transaction_phids(&self) -> Vec<&str> {
        self.phid_values("transactionPHIDs")
            .into_iter()
            .filter_map(Value::as_str)
            .collect()
    }

    /// Trigger PHIDs (rules, the hook for firehose, the app for test calls).
    pub fn trigger_phids(&self) -> Vec<&Value> {
        self.phid_values("triggerPHIDs")
    }

    /// A payload flag (`test`, `silent`, `secure`) as stored; `false` when
    /// absent, as PHP's `getProperty($key, false)` returns.
    pub fn flag(&self, key: &str) -> Value {
        self.map.get(key).cloned().unwrap_or(Value::Bool(false))
    }

    /// The last recorded error, if any: `(errorType, errorCode)` as stored.
    pub fn error(&self) -> (Option<&str>, Option<&Value>) {
        (
            self.map.get("errorType").and_then(Value::as_str),
            self.map.get("errorCode"),
        )
    }

    /// Sets `errorType` and `errorCode`, keeping each key's position when it
    /// already exists (as PHP's array assignment does).
    pub fn set_error(&mut self, error_type: ErrorType, code: &ErrorCode) {
        self.map
            .insert("errorType".to_owned(), Value::from(error_type.as_str()));
        self.map.insert("errorCode".to_owned(), code.to_json());
    }

    /// The column text, encoded as PHP's `json_encode` would.
    pub fn to_column(&self) -> String {
        phpjson::encode_compact(&Value::Object(self.map.clone()))
    }

    fn phid_values(&self, key: &str) -> Vec<&Value> {
        match self.map.get(key) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(Value::Object(map)) => map.values().collect(),
            _ => Vec::new(),
        }
    }

    fn check_phid_collection(&self, key: &'static str) -> Result<(), PropertiesError> {
        match self.map.get(key) {
            None | Some(Value::Null | Value::Array(_) | Value::Object(_)) => Ok(()),
            Some(other) => Err(PropertiesError::WrongShape {
                key,
                found: json_type(other),
            }),
        }
    }
}

/// A key PHP kept as an integer array index (a transaction id): decimal
/// digits with no leading zero, within PHP's integer range. PHP keeps any
/// other key as a string.
fn transaction_id(key: &str) -> Option<i64> {
    let digits = !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit());
    let canonical = digits && (key == "0" || !key.starts_with('0'));
    if canonical {
        key.parse().ok()
    } else {
        None
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_unknown_keys_order_and_shapes() {
        let stored = r#"{"zeta":1,"transactionPHIDs":{"PHID-XACT-b":"PHID-XACT-b","PHID-XACT-a":"PHID-XACT-a"},"retry":"forever","errorCode":500,"errorType":"http","custom":{"n":[1,2.5,null]},"uri":"https:\/\/x\/\u00e9"}"#;
        let mut props = Properties::parse(stored).expect("parses");
        assert_eq!(props.to_column(), stored);
        props.set_error(ErrorType::Http, &ErrorCode::Number(200));
        assert_eq!(
            props.to_column(),
            stored.replace("\"errorCode\":500", "\"errorCode\":200")
        );
    }

    #[test]
    fn new_error_keys_are_appended() {
        let mut props = Properties::parse(r#"{"retry":"never"}"#).expect("parses");
        props.set_error(ErrorType::Hook, &ErrorCode::Text("disabled".into()));
        assert_eq!(
            props.to_column(),
            r#"{"retry":"never","errorType":"hook","errorCode":"disabled"}"#
        );
    }

    #[test]
    fn triggers_come_from_lists_or_objects_in_stored_order() {
        let props = Properties::parse(
            r#"{"triggerPHIDs":{"b":"PHID-R2","a":"PHID-R1"},"transactionPHIDs":[]}"#,
        )
        .expect("parses");
        assert_eq!(props.trigger_phids(), vec!["PHID-R2", "PHID-R1"]);
        let list = Properties::parse(r#"{"triggerPHIDs":["PHID-R"]}"#).expect("parses");
        assert_eq!(list.trigger_phids(), vec!["PHID-R"]);
        let empty = Properties::parse("{}").expect("parses");
        assert!(empty.transaction_phids().is_empty());
        assert!(empty.listed_transaction_phids().is_empty());
    }

    /// A test call stores the object's ten newest transactions keyed by id,
    /// newest first; PHP sends them by id descending.
    #[test]
    fn id_keyed_transactions_go_by_id_descending() {
        let props = Properties::parse(
            r#"{"transactionPHIDs":{"12":"PHID-A","457":"PHID-C","99":"PHID-B"}}"#,
        )
        .expect("parses");
        assert_eq!(
            props.transaction_phids(),
            vec!["PHID-C", "PHID-B", "PHID-A"]
        );
        assert_eq!(
            props.listed_transaction_phids(),
            vec!["PHID-A", "PHID-C", "PHID-B"]
        );
    }

    /// A live edit stores its transactions keyed by PHID in the order it
    /// applied them, oldest first; PHP sends the reverse.
    #[test]
    fn phid_keyed_transactions_and_lists_are_reversed() {
        let live = Properties::parse(
            r#"{"transactionPHIDs":{"PHID-XACT-1":"PHID-XACT-1","PHID-XACT-2":"PHID-XACT-2","PHID-XACT-3":"PHID-XACT-3"}}"#,
        )
        .expect("parses");
        assert_eq!(
            live.transaction_phids(),
            vec!["PHID-XACT-3", "PHID-XACT-2", "PHID-XACT-1"]
        );
        let list =
            Properties::parse(r#"{"transactionPHIDs":["PHID-1","PHID-2"]}"#).expect("parses");
        assert_eq!(list.transaction_phids(), vec!["PHID-2", "PHID-1"]);
        // "012" is a string key in PHP, so the object is not id-keyed.
        let mixed = Properties::parse(r#"{"transactionPHIDs":{"5":"PHID-A","012":"PHID-B"}}"#)
            .expect("parses");
        assert_eq!(mixed.transaction_phids(), vec!["PHID-B", "PHID-A"]);
    }

    #[test]
    fn retry_is_forever_only_when_exactly_forever() {
        for (text, forever) in [
            (r#"{"retry":"forever"}"#, true),
            (r#"{"retry":"never"}"#, false),
            (r#"{"retry":"Forever"}"#, false),
            (r#"{"retry":true}"#, false),
            (r#"{}"#, false),
        ] {
            let props = Properties::parse(text).expect("parses");
            assert_eq!(props.retries_forever(), forever, "{text}");
        }
    }

    #[test]
    fn flags_pass_through_as_stored() {
        let props = Properties::parse(r#"{"silent":"yes","secure":null}"#).expect("parses");
        assert_eq!(props.flag("silent"), Value::from("yes"));
        assert_eq!(props.flag("secure"), Value::Null);
        assert_eq!(props.flag("test"), Value::Bool(false));
    }

    #[test]
    fn unusable_properties_are_typed_errors() {
        assert!(matches!(
            Properties::parse("not json"),
            Err(PropertiesError::NotJson(_))
        ));
        assert_eq!(
            Properties::parse("[1]"),
            Err(PropertiesError::NotAnObject("a list"))
        );
        assert_eq!(
            Properties::parse("\"x\""),
            Err(PropertiesError::NotAnObject("a string"))
        );
        assert_eq!(
            Properties::parse(r#"{"triggerPHIDs":"PHID-X"}"#),
            Err(PropertiesError::WrongShape {
                key: "triggerPHIDs",
                found: "a string"
            })
        );
        assert!(Properties::parse("[]").is_ok());
    }

    #[test]
    fn unparseable_text_is_preserved() {
        let mut props = Properties::preserving_unparseable("{broken");
        props.set_error(
            ErrorType::Hook,
            &ErrorCode::Text("invalid-properties".into()),
        );
        let column = props.to_column();
        let back: Value = serde_json::from_str(&column).expect("valid JSON");
        assert_eq!(back[ORIGINAL_PROPERTIES_KEY], "{broken");
        assert_eq!(back["errorCode"], "invalid-properties");
        assert!(back.get(ORIGINAL_PROPERTIES_TRUNCATED_KEY).is_none());
    }

    /// 3 MB of control characters encode as 18 MB; what is kept is cut to
    /// the budget on a character boundary, marked, and still a JSON object.
    #[test]
    fn oversized_unparseable_text_is_cut_to_fit_and_marked() {
        let original = format!("\u{e9}{}", "\u{1}".repeat(3_000_000));
        let mut props = Properties::preserving_unparseable(&original);
        props.set_error(
            ErrorType::Hook,
            &ErrorCode::Text("invalid-properties".into()),
        );
        let column = props.to_column();
        let fixed = r#"{"gorgeOriginalProperties":"","gorgeOriginalPropertiesTruncated":3000002,"errorType":"hook","errorCode":"invalid-properties"}"#;
        assert!(
            column.len() <= ORIGINAL_PROPERTIES_ENCODED_MAX + fixed.len(),
            "{}",
            column.len()
        );
        assert!(column.len() > ORIGINAL_PROPERTIES_ENCODED_MAX - 6);
        let back: Value = serde_json::from_str(&column).expect("valid JSON");
        let kept = back[ORIGINAL_PROPERTIES_KEY].as_str().expect("a string");
        assert!(original.starts_with(kept) && kept.len() < original.len());
        assert!(kept.starts_with('\u{e9}'));
        assert_eq!(back[ORIGINAL_PROPERTIES_TRUNCATED_KEY], 3_000_002);
        assert_eq!(back["errorType"], "hook");
        // Exactly at the budget nothing is cut.
        let fits = "x".repeat(ORIGINAL_PROPERTIES_ENCODED_MAX);
        let kept = Properties::preserving_unparseable(&fits).to_column();
        assert_eq!(
            kept.len(),
            ORIGINAL_PROPERTIES_ENCODED_MAX + r#"{"gorgeOriginalProperties":""}"#.len()
        );
    }
}
