//! What the hand-off from Phorge's PHP delivery needs to see in Phorge's
//! other databases: global silent mode (`{ns}_config.config_entry`) and
//! PHP delivery tasks (`{ns}_worker.worker_activetask`), leftover or
//! adopted.
//!
//! Read-only, and optional: a daemon whose account cannot read these
//! tables still delivers; the caller reports once that it cannot see them.

use webhook_core::hold::php_truthy_json;
use webhook_core::hold::ConfigUnreadable;
use webhook_core::StoreError;

use crate::connector::Connector;
use crate::rows;
use crate::sql;

/// Phorge's delivery tasks still in its task queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PhpDeliveryTasks {
    /// `HeraldWebhookWorker` tasks a PHP taskmaster could lease now (no
    /// owner, or a lapsed lease).
    pub queued: u64,
    /// `HeraldWebhookWorker` tasks leased on PHP's side: by a taskmaster,
    /// or yielded until later.
    pub leased: u64,
    /// `HeraldWebhookWorker` tasks a daemon instance leases (task
    /// adoption): `phd` cannot run them.
    pub adopted: u64,
}

impl PhpDeliveryTasks {
    /// Any task PHP runs or may run: PHP is (or will be) delivering too.
    pub fn any(&self) -> bool {
        self.queued + self.leased > 0
    }
}

/// Counts `HeraldWebhookWorker` tasks in Phorge's task queue
/// (`sql::php_delivery_tasks`).
pub(crate) async fn php_delivery_tasks(
    connector: &Connector,
    namespace: &str,
) -> Result<PhpDeliveryTasks, StoreError> {
    let statement = sql::php_delivery_tasks(namespace);
    let row = connector.first_row(statement.as_str(), ()).await?;
    let mut row = row.ok_or_else(|| StoreError::MalformedRow {
        id: 0,
        reason: "task count returned no row".to_owned(),
    })?;
    Ok(PhpDeliveryTasks {
        queued: rows::unsigned(&mut row, 0, "queued", 0)?,
        leased: rows::unsigned(&mut row, 1, "leased", 0)?,
        adopted: rows::unsigned(&mut row, 2, "adopted", 0)?,
    })
}

/// Who ran Phorge's recent webhook tasks, from its task archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskRunners {
    /// Archived under a daemon's lease: the daemon delivered.
    pub daemon: u64,
    /// Archived under a taskmaster's: `phd` ran the task (delivered it, or
    /// declined a request no longer queued).
    pub php: u64,
}

/// [`TaskRunners`] of the last `limit` archived webhook tasks
/// (`sql::recent_task_runners`).
pub(crate) async fn recent_task_runners(
    connector: &Connector,
    namespace: &str,
    limit: u64,
) -> Result<TaskRunners, StoreError> {
    let statement = sql::recent_task_runners(namespace);
    let row = connector.first_row(statement.as_str(), (limit,)).await?;
    let mut row = row.ok_or_else(|| connector.unexpected("recent task runners", "no row"))?;
    let daemon = rows::unsigned(&mut row, 0, "daemon", 0)?;
    let all = rows::unsigned(&mut row, 1, "all", 0)?;
    Ok(TaskRunners {
        daemon,
        php: all.saturating_sub(daemon),
    })
}

/// `PhorgeConfig::silent_mode` from `config_entry`
/// (`sql::silent_mode`).
pub(crate) async fn silent_mode(
    connector: &Connector,
    namespace: &str,
) -> Result<bool, ConfigUnreadable> {
    let statement = sql::silent_mode(namespace);
    let value = connector.first_row(statement.as_str(), ()).await?;
    match value {
        // No row (or a deleted one): the default, off.
        None => Ok(false),
        Some(mut row) => {
            // Phorge stores the value JSON-encoded and reads it back
            // with json_decode.
            let text = rows::text(&mut row, 0, "value", 0)?;
            Ok(php_truthy_json(&text))
        }
    }
}
