//! The checks `explain` makes with the daemon's own code instead of rules
//! of its own: Phorge's silent mode through the core's [`SilentMode`] over
//! both of Phorge's sources (its `local.json` and the `config_entry`
//! table), the hook's URI through a [`Transport`]'s `resolve` (in the
//! tool, the daemon's `HyperTransport` built from the same settings), and
//! the object check through [`PhorgeObjects`] (store-mysql's, which the
//! dispatcher asks too). They run over the core's ports, so the agreement
//! test runs them on the very doubles it runs the dispatcher on.
//!
//! Every port is only asked: nothing here writes, claims or locks.

use webhook_core::hold::{Reading, Sight, SilentMode};
use webhook_core::{
    Clock, Hook, ObjectLookup, PhorgeObjects, Properties, RequestRow, RequestStatus, Resolution,
    StoreError, Transport,
};

/// A silent-mode reading for a row nobody asked about (a final one).
pub const NOT_ASKED: Sight = Sight {
    local_config: Reading::NotSet,
    database: Reading::Unchecked,
};

/// What the checks are asked of.
#[derive(Clone, Copy)]
pub struct Ports<'a> {
    /// Silent mode over Phorge's sources, wired as the daemon wires it.
    pub silent_mode: &'a SilentMode,
    /// The clock silent mode spaces its reads by.
    pub clock: &'a dyn Clock,
    /// The outbound check; `None` when no transport could be built.
    pub transport: Option<&'a dyn Transport>,
    /// Phorge's application tables, for the object check.
    pub objects: &'a dyn PhorgeObjects,
}

/// What the checks found for one row.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Silent mode's two readings (for a queued row; [`NOT_ASKED`] else).
    pub silent: Sight,
    /// The hook's URI through the outbound check: for a queued row whose
    /// hook exists and is not disabled, as the dispatcher resolves it.
    pub resolution: Option<Resolution>,
    /// The object check, for a row whose own checks pass.
    pub object: Option<ObjectLookup>,
}

impl Ports<'_> {
    /// Every check for `row` and its `hook` (as looked up).
    pub async fn check(
        &self,
        row: &RequestRow,
        hook: Option<&Hook>,
    ) -> Result<Checked, StoreError> {
        let queued = row.status == RequestStatus::Queued;
        let silent = if queued {
            self.silent_mode.refresh(self.clock).await;
            self.silent_mode.sight()
        } else {
            NOT_ASKED
        };
        let resolution = match (hook, self.transport) {
            (Some(hook), Some(transport)) if queued && !hook.is_disabled() => {
                Some(transport.resolve(&hook.uri).await)
            }
            _ => None,
        };
        let object = object_check(self.objects, row).await?;
        Ok(Checked {
            silent,
            resolution,
            object,
        })
    }
}

/// The object check as the dispatcher asks it — the request's object and
/// which of the transactions its properties list still exist — for a row
/// whose own checks pass (`None` for the others: they never get that far).
pub async fn object_check(
    objects: &dyn PhorgeObjects,
    row: &RequestRow,
) -> Result<Option<ObjectLookup>, StoreError> {
    if row.defect.is_some() {
        return Ok(None);
    }
    let Ok(properties) = Properties::parse(&row.properties) else {
        return Ok(None);
    };
    let listed = properties.listed_transaction_phids();
    objects.lookup(&row.object_phid, &listed).await.map(Some)
}
