//! What the hand-off from Phorge's PHP delivery needs to see in Phorge's
//! other databases: global silent mode (`{ns}_config.config_entry`) and
//! leftover PHP delivery tasks (`{ns}_worker.worker_activetask`).
//!
//! Read-only, and optional: a daemon whose account cannot read these
//! tables still delivers; the caller reports once that it cannot see them.

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::Row;
use webhook_core::{PhorgeConfig, StoreError};

use crate::rows;
use crate::sql;
use crate::store::MysqlStore;

/// Phorge's delivery tasks still in its task queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PhpDeliveryTasks {
    /// `HeraldWebhookWorker` tasks waiting for a PHP worker.
    pub queued: u64,
    /// `HeraldWebhookWorker` tasks a PHP worker holds right now.
    pub leased: u64,
}

impl PhpDeliveryTasks {
    /// Any task at all: PHP is (or will be) delivering too.
    pub fn any(&self) -> bool {
        self.queued + self.leased > 0
    }
}

impl MysqlStore {
    /// Counts `HeraldWebhookWorker` tasks in Phorge's task queue. Any means
    /// PHP delivery was not switched off and receivers get every request
    /// twice.
    pub async fn php_delivery_tasks(&self) -> Result<PhpDeliveryTasks, StoreError> {
        let statement = sql::php_delivery_tasks(self.namespace());
        let mut conn = self.conn().await?;
        let row: Option<Row> = conn
            .exec_first(statement.as_str(), ())
            .await
            .map_err(|err| self.statement_error(err))?;
        let mut row = row.ok_or_else(|| StoreError::MalformedRow {
            id: 0,
            reason: "task count returned no row".to_owned(),
        })?;
        Ok(PhpDeliveryTasks {
            queued: rows::unsigned(&mut row, 0, "queued", 0)?,
            leased: rows::unsigned(&mut row, 1, "leased", 0)?,
        })
    }
}

#[async_trait]
impl PhorgeConfig for MysqlStore {
    async fn silent_mode(&self) -> Result<bool, StoreError> {
        let statement = sql::silent_mode(self.namespace());
        let mut conn = self.conn().await?;
        let value: Option<Row> = conn
            .exec_first(statement.as_str(), ())
            .await
            .map_err(|err| self.statement_error(err))?;
        match value {
            // No row (or a deleted one): the default, off.
            None => Ok(false),
            Some(mut row) => {
                let text = rows::text(&mut row, 0, "value", 0)?;
                Ok(is_json_true(&text))
            }
        }
    }
}

/// The option is a boolean stored as JSON: PHP writes `true`/`false`.
fn is_json_true(value: &str) -> bool {
    matches!(value.trim(), "true" | "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_true_is_silent() {
        assert!(is_json_true("true"));
        assert!(is_json_true(" true\n"));
        assert!(is_json_true("1"));
        assert!(!is_json_true("false"));
        assert!(!is_json_true("null"));
        assert!(!is_json_true("\"true\""));
        assert!(!is_json_true(""));
    }
}
