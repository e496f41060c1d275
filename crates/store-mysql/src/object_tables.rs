//! Where Phorge keeps each PHID type's objects and their transactions
//! ([`OBJECT_TABLES`]), read off Phorge's storage classes: each class's
//! application names its database, `{namespace}_{application}`, and Lisk
//! derives the table from the class name. Data only; the statements over
//! these tables are in [`crate::sql`], their use in [`crate::objects`].

/// Where Phorge keeps the objects of one PHID type and their transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectTables {
    /// The four letters of the PHID type (`TASK` in `PHID-TASK-…`).
    pub phid_type: &'static str,
    /// The object's application: its database is `{namespace}_{this}`.
    pub object_application: &'static str,
    /// The object's table.
    pub object_table: &'static str,
    /// The application of the object's transactions (not always the
    /// object's: a commit's transactions are audit's).
    pub transaction_application: &'static str,
    /// The transaction table.
    pub transaction_table: &'static str,
}

const fn tables(
    phid_type: &'static str,
    object: (&'static str, &'static str),
    transactions: (&'static str, &'static str),
) -> ObjectTables {
    ObjectTables {
        phid_type,
        object_application: object.0,
        object_table: object.1,
        transaction_application: transactions.0,
        transaction_table: transactions.1,
    }
}

/// The objects Herald can call webhooks about (every adapter that supports
/// webhooks), the hook itself (the default object of a test call), and the
/// objects most often named in a test call.
pub const OBJECT_TABLES: &[ObjectTables] = &[
    tables(
        "TASK",
        ("maniphest", "maniphest_task"),
        ("maniphest", "maniphest_transaction"),
    ),
    tables(
        "DREV",
        ("differential", "differential_revision"),
        ("differential", "differential_transaction"),
    ),
    tables(
        "CMIT",
        ("repository", "repository_commit"),
        ("audit", "audit_transaction"),
    ),
    tables(
        "WIKI",
        ("phriction", "phriction_document"),
        ("phriction", "phriction_transaction"),
    ),
    tables(
        "MOCK",
        ("pholio", "pholio_mock"),
        ("pholio", "pholio_transaction"),
    ),
    tables(
        "QUES",
        ("ponder", "ponder_question"),
        ("ponder", "ponder_questiontransaction"),
    ),
    tables(
        "PROJ",
        ("project", "project"),
        ("project", "project_transaction"),
    ),
    tables(
        "BLOG",
        ("phame", "phame_blog"),
        ("phame", "phame_blogtransaction"),
    ),
    tables(
        "POST",
        ("phame", "phame_post"),
        ("phame", "phame_posttransaction"),
    ),
    tables(
        "CEVT",
        ("calendar", "calendar_event"),
        ("calendar", "calendar_eventtransaction"),
    ),
    tables(
        "HWBH",
        ("herald", "herald_webhook"),
        ("herald", "herald_webhooktransaction"),
    ),
    tables("PSTE", ("paste", "paste"), ("paste", "paste_transaction")),
    tables(
        "REPO",
        ("repository", "repository"),
        ("repository", "repository_transaction"),
    ),
    tables("FILE", ("file", "file"), ("file", "file_transaction")),
    tables(
        "BDGE",
        ("badges", "badges_badge"),
        ("badges", "badges_transaction"),
    ),
    tables(
        "LEGD",
        ("legalpad", "legalpad_document"),
        ("legalpad", "legalpad_transaction"),
    ),
    tables(
        "POLL",
        ("slowvote", "slowvote_poll"),
        ("slowvote", "slowvote_transaction"),
    ),
    tables(
        "CDWN",
        ("countdown", "countdown"),
        ("countdown", "countdown_transaction"),
    ),
    tables(
        "OPKG",
        ("owners", "owners_package"),
        ("owners", "owners_packagetransaction"),
    ),
    tables(
        "DSHB",
        ("dashboard", "dashboard"),
        ("dashboard", "dashboard_transaction"),
    ),
];

/// The tables of a PHID type, if known.
pub fn object_tables(phid_type: &str) -> Option<&'static ObjectTables> {
    OBJECT_TABLES.iter().find(|t| t.phid_type == phid_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lisk's rule for a storage class's table: the lower-cased class name
    /// without a leading `phabricator`/`phorge`, then without its
    /// application's name, joined to the application by `_` (the
    /// application alone when nothing is left). Ponder's question
    /// transactions override it.
    fn lisk_table(application: &str, class: &str) -> String {
        let mut rest = class.to_lowercase();
        for prefix in ["phabricator", "phorge", application] {
            if let Some(stripped) = rest.strip_prefix(prefix) {
                rest = stripped.to_owned();
            }
        }
        if rest.is_empty() {
            application.to_owned()
        } else {
            format!("{application}_{rest}")
        }
    }

    /// Per PHID type, Phorge's object class and transaction class with the
    /// application each names, as its source declares them.
    /// `(application, class)`.
    type Class = (&'static str, &'static str);

    const CLASSES: &[(&str, Class, Class)] = &[
        (
            "TASK",
            ("maniphest", "ManiphestTask"),
            ("maniphest", "ManiphestTransaction"),
        ),
        (
            "DREV",
            ("differential", "DifferentialRevision"),
            ("differential", "DifferentialTransaction"),
        ),
        (
            "CMIT",
            ("repository", "PhabricatorRepositoryCommit"),
            ("audit", "PhabricatorAuditTransaction"),
        ),
        (
            "WIKI",
            ("phriction", "PhrictionDocument"),
            ("phriction", "PhrictionTransaction"),
        ),
        (
            "MOCK",
            ("pholio", "PholioMock"),
            ("pholio", "PholioTransaction"),
        ),
        (
            "QUES",
            ("ponder", "PonderQuestion"),
            ("ponder", "PonderQuestionTransaction"),
        ),
        (
            "PROJ",
            ("project", "PhabricatorProject"),
            ("project", "PhabricatorProjectTransaction"),
        ),
        (
            "BLOG",
            ("phame", "PhameBlog"),
            ("phame", "PhameBlogTransaction"),
        ),
        (
            "POST",
            ("phame", "PhamePost"),
            ("phame", "PhamePostTransaction"),
        ),
        (
            "CEVT",
            ("calendar", "PhabricatorCalendarEvent"),
            ("calendar", "PhabricatorCalendarEventTransaction"),
        ),
        (
            "HWBH",
            ("herald", "HeraldWebhook"),
            ("herald", "HeraldWebhookTransaction"),
        ),
        (
            "PSTE",
            ("paste", "PhabricatorPaste"),
            ("paste", "PhabricatorPasteTransaction"),
        ),
        (
            "REPO",
            ("repository", "PhabricatorRepository"),
            ("repository", "PhabricatorRepositoryTransaction"),
        ),
        (
            "FILE",
            ("file", "PhabricatorFile"),
            ("file", "PhabricatorFileTransaction"),
        ),
        (
            "BDGE",
            ("badges", "PhabricatorBadgesBadge"),
            ("badges", "PhabricatorBadgesTransaction"),
        ),
        (
            "LEGD",
            ("legalpad", "LegalpadDocument"),
            ("legalpad", "LegalpadTransaction"),
        ),
        (
            "POLL",
            ("slowvote", "PhabricatorSlowvotePoll"),
            ("slowvote", "PhabricatorSlowvoteTransaction"),
        ),
        (
            "CDWN",
            ("countdown", "PhabricatorCountdown"),
            ("countdown", "PhabricatorCountdownTransaction"),
        ),
        (
            "OPKG",
            ("owners", "PhabricatorOwnersPackage"),
            ("owners", "PhabricatorOwnersPackageTransaction"),
        ),
        (
            "DSHB",
            ("dashboard", "PhabricatorDashboard"),
            ("dashboard", "PhabricatorDashboardTransaction"),
        ),
    ];

    /// Tables whose class overrides Lisk's rule.
    const OVERRIDDEN: &[(&str, &str)] =
        &[("PonderQuestionTransaction", "ponder_questiontransaction")];

    #[test]
    fn every_entry_names_the_tables_phorges_classes_have() {
        assert_eq!(OBJECT_TABLES.len(), CLASSES.len());
        for (phid_type, (object_app, object_class), (xact_app, xact_class)) in CLASSES {
            let entry = object_tables(phid_type).expect("type is mapped");
            let table = |app: &str, class: &str| {
                OVERRIDDEN
                    .iter()
                    .find(|(c, _)| *c == class)
                    .map_or_else(|| lisk_table(app, class), |(_, t)| (*t).to_owned())
            };
            assert_eq!(
                (entry.object_application, entry.object_table),
                (*object_app, table(object_app, object_class).as_str()),
                "{phid_type} object"
            );
            assert_eq!(
                (entry.transaction_application, entry.transaction_table),
                (*xact_app, table(xact_app, xact_class).as_str()),
                "{phid_type} transactions"
            );
        }
    }

    #[test]
    fn unknown_types_have_no_tables() {
        assert!(object_tables("????").is_none());
        assert!(object_tables("XACT").is_none());
        assert!(object_tables("task").is_none());
    }
}
