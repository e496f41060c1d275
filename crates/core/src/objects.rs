//! What Phorge's worker loads before it calls a hook: the request's object
//! and, of the transactions the request lists, those that still exist,
//! newest first (transaction id descending). A destroyed object is never
//! called about: the request fails with hook error `object`.
//!
//! [`PhorgeObjects`] reads the object's application tables; where they
//! cannot be seen (a PHID type with no known tables, a missing grant),
//! [`Properties::transaction_phids`](crate::Properties::transaction_phids)
//! orders the stored list the way Phorge would have, from its shape alone.
//! Nothing here is cached: each delivery asks afresh, so a deleted object
//! never looks alive for longer than the delivery that was under way.

use std::fmt;

use async_trait::async_trait;

use crate::store::StoreError;

/// What the object's application tables say about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectLookup {
    /// The object exists. Of the listed transactions, those that exist and
    /// belong to the object, newest first.
    Found {
        /// Transaction PHIDs, transaction id descending.
        transactions: Vec<String>,
    },
    /// The object no longer exists (`bin/remove destroy`).
    Gone,
    /// The tables cannot be read here; the stored list is used instead.
    Unseen(Unseen),
}

/// Why an object's tables cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Unseen {
    /// No object source was given to the dispatcher.
    NoSource,
    /// No tables are known for this PHID type.
    UnknownType(String),
    /// The tables of this type are missing or not readable by this account
    /// (`table` names what was refused, as `database.table`).
    NoAccess {
        /// The PHID type.
        phid_type: String,
        /// The database and table that could not be read.
        table: String,
    },
    /// The database refused this one lookup for good (say, more listed
    /// transactions than a statement takes): asking again would not help.
    Refused {
        /// The PHID type.
        phid_type: String,
        /// The server's error number.
        code: u16,
    },
}

impl Unseen {
    /// A stable name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoSource => "no_source",
            Self::UnknownType(_) => "unknown_type",
            Self::NoAccess { .. } => "no_access",
            Self::Refused { .. } => "refused",
        }
    }
}

impl fmt::Display for Unseen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSource => f.write_str("no object source is configured"),
            Self::UnknownType(phid_type) => {
                write!(
                    f,
                    "no application tables are known for PHID type {phid_type}"
                )
            }
            Self::NoAccess { phid_type, table } => {
                write!(f, "cannot read {table} (objects of type {phid_type})")
            }
            Self::Refused { phid_type, code } => write!(
                f,
                "the database refused the lookup of an object of type {phid_type} (error {code})"
            ),
        }
    }
}

/// Phorge's application tables, as far as delivery needs them.
#[async_trait]
pub trait PhorgeObjects: Send + Sync {
    /// Whether `object_phid` exists, and which of `transaction_phids` exist
    /// on it, newest first. `Err` only when the database failed; tables
    /// that cannot be read are [`ObjectLookup::Unseen`].
    async fn lookup(
        &self,
        object_phid: &str,
        transaction_phids: &[&str],
    ) -> Result<ObjectLookup, StoreError>;
}
