//! The payload test vectors of the hand-off contract (protocol §7), shared by
//! every test that checks bytes and usable by receivers that want to check
//! their own signature code against Phorge's bytes. The bodies are the
//! files in `crates/core/vectors/` (described in its README), so examples
//! can feed them to `webhook-admin sign` and `verify` as they are.

/// The HMAC key of both vectors.
pub const KEY: &str = "abcdefghijklmnopqrstuvwxyz234567";

/// First vector: the edited object.
pub const OBJECT_PHID: &str = "PHID-TASK-abcdefghijklmnopqrst";
/// First vector: the row's `dateCreated` (the payload's `epoch`).
pub const DATE_CREATED: u64 = 1_700_000_000;
/// First vector: the stored `properties`, a live edit's shape: the
/// transactions keyed by PHID in the order the edit applied them, oldest
/// first.
pub const PROPERTIES: &str = r#"{"retry":"forever","transactionPHIDs":{"PHID-XACT-TASK-aaaaaaaaaaaaaaa":"PHID-XACT-TASK-aaaaaaaaaaaaaaa","PHID-XACT-TASK-bbbbbbbbbbbbbbb":"PHID-XACT-TASK-bbbbbbbbbbbbbbb"},"triggerPHIDs":["PHID-HRUL-abcdefghijklmnopqrst"],"silent":false,"secure":false}"#;
/// First vector: the transactions in the order they were applied (`aaa`
/// before `bbb`, so `bbb` has the higher transaction id).
pub const TRANSACTIONS_APPLIED: [&str; 2] = [
    "PHID-XACT-TASK-aaaaaaaaaaaaaaa",
    "PHID-XACT-TASK-bbbbbbbbbbbbbbb",
];
/// First vector: the exact body (415 bytes, trailing newline included);
/// the transactions newest first, as Phorge's worker sends them.
pub const BODY: &str = include_str!("../vectors/task-edit.json");
/// First vector: its signature under [`KEY`].
pub const SIGNATURE: &str = "29cf1cc7b8f35a03d8258d0e14fcef0740e4667135a4c85460a06ee0f8526a48";

/// Escaping vector: the object PHID.
pub const ESCAPING_OBJECT_PHID: &str = "PHID-TEST-a/b\"c\\d\u{e9}\u{4e2d}\u{1F600}<&>";
/// Escaping vector: `dateCreated`.
pub const ESCAPING_DATE_CREATED: u64 = 5;
/// Escaping vector: the stored `properties`.
pub const ESCAPING_PROPERTIES: &str = r#"{"triggerPHIDs":[]}"#;
/// Escaping vector: the exact body (238 bytes): quotes, backslashes,
/// slashes left as they are, non-ASCII as lower-case `\uXXXX` (a
/// surrogate pair above the BMP), empty lists.
pub const ESCAPING_BODY: &str = include_str!("../vectors/escaping.json");
/// Escaping vector: its signature under [`KEY`].
pub const ESCAPING_SIGNATURE: &str =
    "c936d5c09dbf58a4f00e7da63bbd9e2c1a33ee54951013234e98cb646ace7184";
