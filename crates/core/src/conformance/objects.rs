//! Conformance cases for the object check (`PhorgeObjects`): an object's
//! existing transactions newest first, a destroyed object gone, a type
//! without known tables unseen.

use crate::objects::{ObjectLookup, Unseen};

use super::TestBed;

const TASK: &str = "PHID-TASK-conformanceaaaaaaaaa";
const OTHER_TASK: &str = "PHID-TASK-conformancebbbbbbbbb";

pub(super) async fn object_lookup_lists_the_objects_existing_transactions_newest_first(
    bed: &dyn TestBed,
) {
    let [t1, t2, t3] = [
        "PHID-XACT-TASK-conform1",
        "PHID-XACT-TASK-conform2",
        "PHID-XACT-TASK-conform3",
    ];
    bed.insert_task(TASK, &[t1, t2, t3]).await;
    bed.insert_task(OTHER_TASK, &["PHID-XACT-TASK-conformother"])
        .await;
    let listed = [
        t1,
        t3,
        "PHID-XACT-TASK-conformother",
        "PHID-XACT-TASK-conformgone",
    ];
    let found = bed.objects().lookup(TASK, &listed).await.expect("lookup");
    assert_eq!(
        found,
        ObjectLookup::Found {
            transactions: vec![t3.to_owned(), t1.to_owned()]
        },
        "only this object's listed transactions that exist, newest first"
    );
    let none_listed = bed.objects().lookup(TASK, &[]).await.expect("lookup");
    assert_eq!(
        none_listed,
        ObjectLookup::Found {
            transactions: Vec::new()
        }
    );
}

pub(super) async fn object_lookup_finds_a_destroyed_object_gone(bed: &dyn TestBed) {
    bed.insert_task(TASK, &["PHID-XACT-TASK-conform1"]).await;
    bed.insert_task(OTHER_TASK, &[]).await;
    bed.destroy_task(TASK).await;
    let gone = bed
        .objects()
        .lookup(TASK, &["PHID-XACT-TASK-conform1"])
        .await
        .expect("lookup");
    assert_eq!(gone, ObjectLookup::Gone);
    let never = bed
        .objects()
        .lookup("PHID-TASK-conformanceneverexisted", &[])
        .await
        .expect("lookup");
    assert_eq!(never, ObjectLookup::Gone);
    let other = bed.objects().lookup(OTHER_TASK, &[]).await.expect("lookup");
    assert!(matches!(other, ObjectLookup::Found { .. }), "{other:?}");
}

pub(super) async fn object_of_a_type_without_known_tables_is_unseen(bed: &dyn TestBed) {
    let unseen = bed
        .objects()
        .lookup("PHID-ZZZZ-conformanceaaaaaaaaa", &["PHID-XACT-ZZZZ-x"])
        .await
        .expect("lookup");
    assert_eq!(
        unseen,
        ObjectLookup::Unseen(Unseen::UnknownType("ZZZZ".to_owned()))
    );
}
