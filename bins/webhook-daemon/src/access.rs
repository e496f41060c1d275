//! The database account's privileges, checked once the database answers:
//! what delivery needs ([`check_delivery_access`]: its statements on the
//! herald tables, and Phorge's named locks) before its first poll, and,
//! with task adoption on, what adoption needs (`crate::adoption`). A
//! missing one stops the daemon, named (exit 1); until delivery's check
//! has passed, delivery does not start and `/readyz` says why
//! ([`DeliveryAccess`]). Both checks wait and ask again the same way
//! ([`missing_once_answered`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};
use webhook_core::StoreError;
use webhook_store_mysql::MysqlStore;

use crate::pace::Pace;
use crate::server_clock::ServerClock;

/// How soon a check that could not be made is tried again.
const CHECK_RETRY: Duration = Duration::from_secs(1);

/// A check that cannot be made is said at warn at most this often (and
/// at debug in between).
const WAITING_WARN_EVERY: Duration = Duration::from_secs(60);

/// Runs `check` until it can tell (the database answers it, Phorge's
/// tables are there), saying why it waits under `waiting_event`; then
/// what it found missing.
pub(crate) async fn missing_once_answered<F, Fut>(
    waiting_event: &'static str,
    waiting: &'static str,
    mut check: F,
    mut on_wait: impl FnMut(&StoreError),
) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<String>, StoreError>>,
{
    let mut warn_pace = Pace::every(WAITING_WARN_EVERY);
    loop {
        let err = match check().await {
            Ok(missing) => return missing,
            Err(err) => err,
        };
        on_wait(&err);
        if warn_pace.due() {
            warn!(event = waiting_event, error = %err, "{waiting}");
        } else {
            debug!(event = waiting_event, error = %err);
        }
        tokio::time::sleep(CHECK_RETRY).await;
    }
}

/// Where delivery's check stands, for `/readyz` and for the dispatcher's
/// start.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    /// Not checked yet; why not, once a check could not be made.
    Unchecked(Option<String>),
    /// The account may run everything delivery runs.
    Granted,
}

/// Delivery's check as the daemon's other parts see it.
#[derive(Debug)]
pub struct DeliveryAccess(watch::Sender<Standing>);

impl Default for DeliveryAccess {
    fn default() -> Self {
        Self(watch::Sender::new(Standing::Unchecked(None)))
    }
}

impl DeliveryAccess {
    /// Completes once the check has passed.
    pub async fn granted(&self) {
        let mut standing = self.0.subscribe();
        // The sender lives in `self`, so the wait only ends with a value.
        let _ = standing.wait_for(|s| *s == Standing::Granted).await;
    }

    /// Why delivery cannot start yet, until the check has passed.
    pub fn not_yet(&self) -> Option<String> {
        match &*self.0.borrow() {
            Standing::Granted => None,
            Standing::Unchecked(None) => {
                Some("the database account's privileges for delivery are being checked".to_owned())
            }
            Standing::Unchecked(Some(why)) => Some(format!(
                "the database account's privileges for delivery cannot be checked yet: {why}"
            )),
        }
    }
}

/// Once the database server's clock is measured (the database answers),
/// checks what delivery needs ([`MysqlStore::delivery_needs_missing`])
/// until it can tell. Returns only when something is missing, naming each;
/// otherwise marks `access` granted and never returns.
pub async fn check_delivery_access(
    store: Arc<MysqlStore>,
    access: Arc<DeliveryAccess>,
    clock: Arc<ServerClock>,
) -> Vec<String> {
    clock.measured().await;
    let missing = missing_once_answered(
        "delivery_access_waiting",
        "cannot check the database account's privileges for delivery yet; delivery starts \
         once they are checked",
        || store.delivery_needs_missing(),
        |err| {
            access
                .0
                .send_replace(Standing::Unchecked(Some(err.to_string())));
        },
    )
    .await;
    if !missing.is_empty() {
        return missing;
    }
    info!(
        event = "delivery_access_checked",
        database = %store.database(),
        "the database account may run every statement delivery runs"
    );
    access.0.send_replace(Standing::Granted);
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn readiness_says_why_delivery_has_not_started() {
        let access = DeliveryAccess::default();
        assert!(access
            .not_yet()
            .is_some_and(|why| why.contains("being checked")));
        access
            .0
            .send_replace(Standing::Unchecked(Some("table missing".into())));
        assert!(access
            .not_yet()
            .is_some_and(|why| why.ends_with("cannot be checked yet: table missing")));
        access.0.send_replace(Standing::Granted);
        assert_eq!(access.not_yet(), None);
        tokio::time::timeout(Duration::from_secs(1), access.granted())
            .await
            .expect("granted");
    }
}
