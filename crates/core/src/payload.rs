//! The signed request body: PhutilJSON's pretty form of
//! `object`/`triggers`/`action`/`transactions`, byte for byte what Phorge's
//! PHP worker sends, and its HMAC-SHA256 signature.

use ring::hmac;
use serde_json::{Map, Value};

use crate::model::{phid_type, RequestRow};
use crate::phpjson;
use crate::properties::Properties;

/// The exact bytes POSTed to a receiver; the signature covers all of them,
/// including the trailing newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    bytes: Vec<u8>,
}

impl Payload {
    /// Builds the body for one request row from its parsed properties, with
    /// the transactions in the order Phorge's worker would send the stored
    /// list when it cannot read the object's transactions (newest first,
    /// judged from the stored shape: see [`Properties::transaction_phids`]).
    ///
    /// `epoch` is the row's `dateCreated`, so every retry describes the same
    /// event with the same bytes.
    pub fn build(row: &RequestRow, properties: &Properties) -> Self {
        let transactions = phid_list(properties.transaction_phids().into_iter().cloned());
        Self::encode(row, properties, transactions)
    }

    /// Builds the body with the transactions Phorge's worker loaded from the
    /// object's transaction table (those that still exist, newest first).
    pub fn with_transactions(
        row: &RequestRow,
        properties: &Properties,
        transactions: &[String],
    ) -> Self {
        let transactions = phid_list(transactions.iter().map(|phid| Value::from(phid.as_str())));
        Self::encode(row, properties, transactions)
    }

    fn encode(row: &RequestRow, properties: &Properties, transactions: Value) -> Self {
        let mut object = Map::new();
        object.insert("type".into(), Value::from(phid_type(&row.object_phid)));
        object.insert("phid".into(), Value::from(row.object_phid.as_str()));

        let mut action = Map::new();
        for flag in ["test", "silent", "secure"] {
            action.insert(flag.into(), properties.flag(flag));
        }
        action.insert("epoch".into(), Value::from(row.date_created));

        let mut body = Map::new();
        body.insert("object".into(), Value::Object(object));
        body.insert(
            "triggers".into(),
            phid_list(properties.trigger_phids().into_iter().cloned()),
        );
        body.insert("action".into(), Value::Object(action));
        body.insert("transactions".into(), transactions);
        Self {
            bytes: phpjson::encode_pretty_object(&body).into_bytes(),
        }
    }

    /// The body bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Consumes the payload, returning its bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Lower-case hex HMAC-SHA256 of the body under the hook's key.
    pub fn sign(&self, hmac_key: &str) -> String {
        sign(hmac_key.as_bytes(), &self.bytes)
    }
}

fn phid_list(phids: impl Iterator<Item = Value>) -> Value {
    Value::Array(
        phids
            .map(|phid| {
                let mut entry = Map::new();
                entry.insert("phid".into(), phid);
                Value::Object(entry)
            })
            .collect(),
    )
}

/// Lower-case hex HMAC-SHA256 of `body` under `key` (the value of the
/// `X-Phabricator-Webhook-Signature` header).
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hex::encode(hmac::sign(&key, body).as_ref())
}

/// Checks a received signature header against `body` in constant time, as a
/// receiver should. Hex case is ignored; anything that is not 64 hex digits
/// fails.
pub fn verify(key: &[u8], body: &[u8], signature_hex: &str) -> bool {
    let Ok(tag) = hex::decode(signature_hex.trim()) else {
        return false;
    };
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    hmac::verify(&key, body, &tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LastResult, RequestStatus};
    use crate::vectors::{self, KEY};

    fn row(object_phid: &str, date_created: u64, properties: &str) -> RequestRow {
        RequestRow {
            id: 1,
            phid: "PHID-HWBR-x".into(),
            webhook_phid: "PHID-HWBH-x".into(),
            object_phid: object_phid.into(),
            status: RequestStatus::Queued,
            properties: properties.into(),
            last_request_result: LastResult::None,
            last_request_epoch: 0,
            date_created,
            date_modified: date_created,
            defect: None,
        }
    }

    fn payload_for(row: &RequestRow) -> Payload {
        let props = Properties::parse(&row.properties).expect("vector properties parse");
        Payload::build(row, &props)
    }

    /// protocol §7, first vector.
    #[test]
    fn spec_vector_is_byte_exact() {
        let row = row(
            vectors::OBJECT_PHID,
            vectors::DATE_CREATED,
            vectors::PROPERTIES,
        );
        let payload = payload_for(&row);
        assert_eq!(std::str::from_utf8(payload.as_bytes()), Ok(vectors::BODY));
        assert_eq!(payload.as_bytes().len(), 415);
        assert_eq!(payload.sign(KEY), vectors::SIGNATURE);
    }

    /// protocol §7, escaping vector.
    #[test]
    fn escaping_vector_is_byte_exact() {
        let row = row(
            vectors::ESCAPING_OBJECT_PHID,
            vectors::ESCAPING_DATE_CREATED,
            vectors::ESCAPING_PROPERTIES,
        );
        let payload = payload_for(&row);
        assert_eq!(
            std::str::from_utf8(payload.as_bytes()),
            Ok(vectors::ESCAPING_BODY)
        );
        assert_eq!(payload.as_bytes().len(), 238);
        assert_eq!(payload.sign(KEY), vectors::ESCAPING_SIGNATURE);
    }

    /// protocol §7's vector is a live edit's shape: PHID-keyed, oldest first;
    /// the body lists the transactions newest first.
    #[test]
    fn live_edit_transactions_go_newest_first() {
        let props = Properties::parse(vectors::PROPERTIES).expect("parses");
        let stored: Vec<&str> = props.listed_transaction_phids();
        assert_eq!(
            stored,
            vec![
                "PHID-XACT-TASK-aaaaaaaaaaaaaaa",
                "PHID-XACT-TASK-bbbbbbbbbbbbbbb"
            ]
        );
        let text = String::from_utf8(
            payload_for(&row(
                vectors::OBJECT_PHID,
                vectors::DATE_CREATED,
                vectors::PROPERTIES,
            ))
            .into_bytes(),
        )
        .expect("ASCII");
        let newest = text.find("bbbbbbbbbbbbbbb").expect("present");
        let oldest = text.find("aaaaaaaaaaaaaaa").expect("present");
        assert!(newest < oldest);
    }

    #[test]
    fn loaded_transactions_are_sent_as_given() {
        let row = row(
            vectors::OBJECT_PHID,
            vectors::DATE_CREATED,
            vectors::PROPERTIES,
        );
        let props = Properties::parse(&row.properties).expect("parses");
        let loaded = [
            "PHID-XACT-TASK-bbbbbbbbbbbbbbb".to_owned(),
            "PHID-XACT-TASK-aaaaaaaaaaaaaaa".to_owned(),
        ];
        let payload = Payload::with_transactions(&row, &props, &loaded);
        assert_eq!(std::str::from_utf8(payload.as_bytes()), Ok(vectors::BODY));
        assert_eq!(payload.sign(KEY), vectors::SIGNATURE);
        let only_one = Payload::with_transactions(&row, &props, &loaded[1..]);
        let text = std::str::from_utf8(only_one.as_bytes()).expect("ASCII");
        assert!(!text.contains("bbbbbbbbbbbbbbb"));
        assert!(text.contains("\"test\": false,"));
        assert!(text.ends_with("}\n"));
    }

    #[test]
    fn verify_accepts_only_the_right_signature() {
        let body = b"{}\n";
        let signature = sign(KEY.as_bytes(), body);
        assert!(verify(KEY.as_bytes(), body, &signature));
        assert!(verify(KEY.as_bytes(), body, &signature.to_uppercase()));
        assert!(!verify(KEY.as_bytes(), b"{}", &signature));
        assert!(!verify(b"other", body, &signature));
        assert!(!verify(KEY.as_bytes(), body, "zz"));
        assert!(!verify(KEY.as_bytes(), body, ""));
        assert!(!verify(KEY.as_bytes(), body, &signature[..62]));
    }

    #[test]
    fn empty_key_still_signs() {
        assert_eq!(sign(b"", b"x").len(), 64);
    }
}
