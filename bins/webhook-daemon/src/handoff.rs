//! The hand-off checks as the daemon reports them: Phorge's global silent
//! mode (held by the core dispatcher through `SilentMode`) and a watch for
//! PHP delivery tasks still in Phorge's task queue — the two mistakes that
//! make receivers get requests they should not, without any error.
//!
//! Both feed `/metrics` and one log line per change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info, warn};
use webhook_core::hold::Sight;
use webhook_core::hold::SilentMode;
use webhook_store_mysql::{MysqlStore, PhpDeliveryTasks};

/// How often Phorge's task queue is looked at.
pub const PHP_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// What the daemon currently knows about the hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandOffStatus {
    /// What the silent-mode check last found, source by source.
    pub silent_mode: Sight,
    /// PHP delivery tasks, when the task queue was readable.
    pub php_tasks: Option<PhpDeliveryTasks>,
    /// Whether this daemon adopts Phorge's delivery tasks (then silent
    /// mode fails rows instead of holding them).
    pub adopting: bool,
}

/// Shared between the watch task, the API and the metrics.
#[derive(Debug)]
pub struct HandOff {
    silent_mode: Arc<SilentMode>,
    php_tasks: Mutex<PhpWatch>,
    adopting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PhpWatch {
    Unchecked,
    Seen(PhpDeliveryTasks),
    Invisible,
}

impl HandOff {
    /// Reports on `silent_mode` (which the dispatcher holds on).
    pub fn new(silent_mode: Arc<SilentMode>) -> Self {
        Self {
            silent_mode,
            php_tasks: Mutex::new(PhpWatch::Unchecked),
            adopting: false,
        }
    }

    /// The daemon adopts Phorge's delivery tasks: tasks a daemon leases
    /// are no PHP delivery, and the few a poll of the queue meets before
    /// they are adopted are not reported as one.
    pub fn adopting(mut self) -> Self {
        self.adopting = true;
        self
    }

    /// A copy of the current verdicts.
    pub fn status(&self) -> HandOffStatus {
        let php = *self.php_tasks.lock().unwrap_or_else(|e| e.into_inner());
        HandOffStatus {
            silent_mode: self.silent_mode.sight(),
            php_tasks: match php {
                PhpWatch::Seen(tasks) => Some(tasks),
                PhpWatch::Unchecked | PhpWatch::Invisible => None,
            },
            adopting: self.adopting,
        }
    }

    /// Looks at Phorge's task queue every [`PHP_CHECK_INTERVAL`], logging
    /// once per change. Runs until the task is dropped.
    pub async fn watch_php_delivery(self: Arc<Self>, store: Arc<MysqlStore>) {
        loop {
            let tasks = match store.php_delivery_tasks().await {
                Ok(tasks) => tasks,
                Err(_) if !matches!(store.ready().await, Ok(())) => {
                    // The database itself is away; /readyz says so.
                    tokio::time::sleep(PHP_CHECK_INTERVAL).await;
                    continue;
                }
                Err(err) => {
                    if self.status_before(PhpWatch::Invisible) != PhpWatch::Invisible {
                        warn!(event = "php_delivery_invisible", error = %err,
                              "cannot read Phorge's task queue {}, so cannot tell whether PHP \
                               still delivers webhooks too", store.task_queue_table());
                    }
                    tokio::time::sleep(PHP_CHECK_INTERVAL).await;
                    continue;
                }
            };
            self.note(tasks);
            tokio::time::sleep(PHP_CHECK_INTERVAL).await;
        }
    }

    /// Records `next`, returning what was known before.
    fn status_before(&self, next: PhpWatch) -> PhpWatch {
        let mut watch = self.php_tasks.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *watch, next)
    }

    fn note(&self, tasks: PhpDeliveryTasks) {
        let before = self.status_before(PhpWatch::Seen(tasks));
        if self.adopting {
            // Task adoption leases whatever PHP could run within a second,
            // and leaves (and counts) what a taskmaster took first.
            return;
        }
        let was_delivering = matches!(before, PhpWatch::Seen(t) if t.any());
        if tasks.any() && !was_delivering {
            warn!(
                event = "php_delivery_detected",
                queued = tasks.queued,
                leased = tasks.leased,
                "Phorge's PHP workers are delivering webhooks too (HeraldWebhookWorker tasks \
                   in its task queue): receivers get requests twice. Hand delivery over \
                   (gorge.webhook.uri) or stop this daemon; see docs/operations/switch-over.md"
            );
        } else if !tasks.any() && was_delivering {
            info!(
                event = "php_delivery_gone",
                "no HeraldWebhookWorker tasks left in Phorge's queue"
            );
        }
    }
}
