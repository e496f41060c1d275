//! `properties` through the real column: PHP-shaped rows read back and
//! parse, and a write-back keeps every unknown key, every shape and the key
//! order, changing only `errorType` / `errorCode`.

use serde_json::Value;
use webhook_core::attempt_write;
use webhook_core::memory_store::NewRequest;
use webhook_core::windows::Cutoffs;
use webhook_core::{
    CandidateQuery, Claim, DeliveryResult, Properties, RequestStatus, Store, Written,
};

use crate::fixture::with_db;

const HOOK: &str = "PHID-HWBH-propertiesaaaaaaaaaa";

/// As PHP's `json_encode` writes it after an earlier PHP attempt: map-shaped
/// PHID lists, an integer errorCode, escaped slashes and non-ASCII, flags
/// stored as non-booleans, and keys the daemon does not know.
const PHP_ROW: &str = concat!(
    r#"{"retry":"forever","#,
    r#""transactionPHIDs":{"PHID-XACT-TASK-bbbbbbbbbbbbbbb":"PHID-XACT-TASK-bbbbbbbbbbbbbbb","#,
    r#""PHID-XACT-TASK-aaaaaaaaaaaaaaa":"PHID-XACT-TASK-aaaaaaaaaaaaaaa"},"#,
    r#""triggerPHIDs":{"457":"PHID-APPS-PhabricatorHeraldApplication"},"#,
    r#""errorType":"http","errorCode":500,"#,
    r#""silent":0,"test":"1","secure":true,"#,
    r#""note":"a\/b caf\u00e9 \ud83d\ude00","#,
    r#""extra":{"nested":[1,"two",null,{"0":false}],"empty":[]}}"#
);

fn keys(value: &Value) -> Vec<String> {
    value.as_object().expect("object").keys().cloned().collect()
}

#[tokio::test]
async fn php_shaped_rows_read_back_and_parse() {
    with_db(|db| async move {
        let store = db.store();
        let now = db.now().await;
        let id = db.insert_request(&NewRequest::queued(HOOK, PHP_ROW)).await;
        let rows = store
            .candidates(&CandidateQuery {
                cutoffs: Cutoffs {
                    now,
                    lease_cutoff: now - 30,
                    retry_cutoff: now - 60,
                },
                limit: 10,
                exclude_hooks: Vec::new(),
            })
            .await
            .expect("candidates");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].id, id);
        assert_eq!(
            rows[0].properties, PHP_ROW,
            "the column text arrives verbatim"
        );

        let properties = Properties::parse(&rows[0].properties).expect("PHP shapes parse");
        assert!(properties.retries_forever());
        assert_eq!(
            properties.listed_transaction_phids(),
            vec![
                "PHID-XACT-TASK-bbbbbbbbbbbbbbb",
                "PHID-XACT-TASK-aaaaaaaaaaaaaaa"
            ],
            "values of the object, in stored order"
        );
        assert_eq!(
            properties.trigger_phids(),
            vec![&Value::from("PHID-APPS-PhabricatorHeraldApplication")]
        );
        assert_eq!(properties.error(), (Some("http"), Some(&Value::from(500))));
        assert_eq!(properties.flag("silent"), Value::from(0));
        assert_eq!(properties.flag("test"), Value::from("1"));
    })
    .await;
}

#[tokio::test]
async fn unknown_keys_and_shapes_survive_a_write_back() {
    with_db(|db| async move {
        let store = db.store();
        let id = db.insert_request(&NewRequest::queued(HOOK, PHP_ROW)).await;
        let row = db.row(id).await;
        let Claim::Won(version) = store.claim(id, row.date_modified).await.expect("claim") else {
            panic!("claim won");
        };
        let properties = Properties::parse(&row.properties).expect("parse");
        let now = db.now().await;
        let (write, _) = attempt_write(
            id,
            version,
            &properties,
            &DeliveryResult::Response { status: 204 },
            now,
        )
        .expect("a response is written");
        assert_eq!(
            store.write_result(&write).await.expect("write"),
            Written::Yes
        );

        let after = db.row(id).await;
        assert_eq!(after.status, RequestStatus::Sent);
        assert_eq!(after.properties, write.properties, "stored byte for byte");

        let before: Value = serde_json::from_str(PHP_ROW).expect("json");
        let stored: Value = serde_json::from_str(&after.properties).expect("json");
        assert_eq!(keys(&stored), keys(&before), "same keys, same order");
        for key in keys(&before) {
            match key.as_str() {
                "errorType" => assert_eq!(stored[&key], Value::from("http")),
                "errorCode" => {
                    assert_eq!(stored[&key], Value::from(204), "an integer, as PHP writes")
                }
                _ => assert_eq!(stored[&key], before[&key], "key {key} changed"),
            }
        }
        // Nested shapes, including the map-shaped lists, keep their order.
        assert_eq!(
            keys(&stored["transactionPHIDs"]),
            keys(&before["transactionPHIDs"])
        );
        // Written the way PHP's json_encode writes: `\/` and `\uXXXX`.
        assert!(
            after
                .properties
                .contains(r#""a\/b caf\u00e9 \ud83d\ude00""#),
            "{}",
            after.properties
        );
    })
    .await;
}
