//! `payload` prints exactly `Payload::build`'s bytes and nothing else where
//! the objects' tables cannot be read (as here; `objects.rs` has them); the
//! protocol §7 vectors come out byte for byte, and `explain` signs them with the
//! hook's key as the daemon would.

use webhook_core::memory_store::NewRequest;
use webhook_core::{sign, Payload, Properties};
use webhook_test_support::{with_db, TestDb};

use crate::support::{hook, on_db, KEY};

const HOOK: &str = "PHID-HWBH-payloadaaaaaaaaaaaa";

use webhook_core::vectors::{
    BODY as VECTOR_BODY, ESCAPING_SIGNATURE, PROPERTIES as VECTOR_PROPERTIES,
    SIGNATURE as VECTOR_SIGNATURE,
};

async fn insert(db: &TestDb, object: &str, created: u64, properties: &str) -> u64 {
    db.insert_request(&NewRequest {
        object_phid: object.to_owned(),
        date_created: Some(created),
        date_modified: Some(created),
        ..NewRequest::queued(HOOK, properties)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_bytes_are_payload_build_exactly() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK, "payload hook", "enabled")).await;
        let ids = [
            insert(&db, "PHID-TASK-abcdefghijklmnopqrst", 1_700_000_000, VECTOR_PROPERTIES).await,
            insert(
                &db,
                "PHID-TEST-a/b\"c\\d\u{e9}\u{4e2d}\u{1F600}<&>",
                5,
                r#"{"triggerPHIDs":[]}"#,
            )
            .await,
            // Map-shaped PHID collections and flags stored as non-booleans.
            insert(
                &db,
                "PHID-DREV-aaaaaaaaaaaaaaaaaaaa",
                1_650_000_000,
                r#"{"transactionPHIDs":{"457":"PHID-XACT-DREV-b","12":"PHID-XACT-DREV-a"},"triggerPHIDs":{"PHID-HWBH-x":"PHID-HWBH-x"},"test":"1","secure":null,"unknown":[1,2]}"#,
            )
            .await,
            insert(&db, "NOT-A-PHID", 1, "[]").await,
        ];
        for id in ids {
            let row = db.row(id).await;
            let properties = Properties::parse(&row.properties).expect("parses");
            let expected = Payload::build(&row, &properties);
            let out = on_db(&db, &["payload", &id.to_string()]).await;
            assert_eq!(out.status, 0, "{out:?}");
            assert_eq!(out.stdout_bytes, expected.as_bytes(), "row {id}");
            assert_eq!(out.stderr, "");
            // The same bytes by PHID.
            let by_phid = on_db(&db, &["payload", &row.phid]).await;
            assert_eq!(by_phid.stdout_bytes, expected.as_bytes());
        }
        let vector = on_db(&db, &["payload", &ids[0].to_string()]).await;
        assert_eq!(vector.stdout, VECTOR_BODY);
        assert_eq!(vector.stdout_bytes.len(), 415);
        assert_eq!(sign(KEY.as_bytes(), &vector.stdout_bytes), VECTOR_SIGNATURE);
        let escaping = on_db(&db, &["payload", &ids[1].to_string()]).await;
        assert_eq!(escaping.stdout_bytes.len(), 238);
        assert!(escaping.stdout.contains(
            r#""phid": "PHID-TEST-a/b\"c\\d\u00e9\u4e2d\ud83d\ude00<&>""#
        ));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_same_payload_and_the_spec_signature() {
    with_db(|db| async move {
        db.insert_hook(&hook(HOOK, "payload hook", "enabled")).await;
        let vector = insert(
            &db,
            "PHID-TASK-abcdefghijklmnopqrst",
            1_700_000_000,
            VECTOR_PROPERTIES,
        )
        .await;
        let escaping = insert(
            &db,
            "PHID-TEST-a/b\"c\\d\u{e9}\u{4e2d}\u{1F600}<&>",
            5,
            r#"{"triggerPHIDs":[]}"#,
        )
        .await;
        for (id, signature, bytes) in [
            (vector, VECTOR_SIGNATURE, 415),
            (escaping, ESCAPING_SIGNATURE, 238),
        ] {
            let out = on_db(&db, &["explain", &id.to_string(), "--json"]).await;
            assert_eq!(out.status, 0, "{out:?}");
            let json = out.json();
            assert_eq!(json["signature"], signature);
            assert_eq!(json["payloadBytes"], bytes);
            let body = on_db(&db, &["payload", &id.to_string()]).await;
            assert_eq!(json["payload"].as_str(), Some(body.stdout.as_str()));
            assert_eq!(
                json["signatureHeaders"][0],
                "X-Phabricator-Webhook-Signature"
            );
            assert!(!out.stdout.contains(KEY));
        }
        // The header names follow the daemon's setting.
        let vars = crate::support::db_env(
            &db,
            &[(
                "GORGE_WEBHOOK_SIGNATURE_HEADERS",
                "X-Phorge-Webhook-Signature",
            )],
        );
        let out = crate::support::run(&vars, &["explain", &vector.to_string()]).await;
        assert!(
            out.stdout
                .contains(&format!("X-Phorge-Webhook-Signature: {VECTOR_SIGNATURE}\n")),
            "{}",
            out.stdout
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_payload_for_a_row_that_would_not_be_sent() {
    with_db(|db| async move {
        let id = insert(&db, "PHID-TASK-aaaaaaaaaaaaaaaaaaaa", 1, "{broken").await;
        let out = on_db(&db, &["payload", &id.to_string()]).await;
        assert_eq!(out.status, 1, "{out:?}");
        assert_eq!(out.stdout, "", "nothing on stdout");
        assert!(
            out.stderr.contains("unparseable properties"),
            "{}",
            out.stderr
        );
    })
    .await;
}
