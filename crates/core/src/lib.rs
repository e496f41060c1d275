//! Pure delivery logic for Phorge's Herald webhook queue.
//!
//! Phorge inserts one `herald_webhookrequest` row per webhook call; this
//! crate decides which rows to deliver and when (the claim protocol and its
//! three windows), builds the exact signed bytes Phorge's PHP worker would
//! send, maps every result into Phorge's value domain, and drives it all
//! from [`Dispatcher`].
//!
//! It performs no I/O and reads no clock: the database, HTTP and time come
//! in through [`Store`] (and, for diagnostics, [`QueueCounts`]; for task
//! adoption, [`adoption::TaskQueue`]), [`Transport`] and [`Clock`]; a
//! source that sees rows as they are committed may hurry the polls along
//! through [`WakeHints`]. With
//! the `testing` feature, `memory_store::MemoryStore` and `ManualClock`
//! make the whole loop deterministic in tests.

#![warn(missing_docs)]

// Each item has one path: modules whose names group many items (the task
// adoption port, settings, windows, silent mode, signing, the attempt
// history, and the test
// doubles) are public and their items live there only; the rest are
// private and their items are re-exported here.

pub mod adoption;
mod breaker;
mod clock;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod dispatch;
mod error_chain;
mod events;
pub mod history;
pub mod hold;
mod lock_name;
#[cfg(any(test, feature = "testing"))]
pub mod memory_store;
mod metrics;
mod model;
mod objects;
mod outcome;
mod pause;
mod payload;
mod phpjson;
mod properties;
pub mod setting;
pub mod signing;
mod store;
mod transport;
mod triage;
#[cfg(any(test, feature = "testing"))]
pub mod vectors;
mod wake_hints;
pub mod windows;

pub use breaker::Breaker;
pub use clock::Clock;
#[cfg(any(test, feature = "testing"))]
pub use clock::ManualClock;
pub use dispatch::Dispatcher;
pub use error_chain::error_chain;
pub use events::{Event, EventKind, EventSink};
pub use lock_name::hook_lock_name;
pub use metrics::{
    HistogramSnapshot, Metrics, MetricsSnapshot, LATENCY_BUCKETS, QUEUE_TIME_BUCKETS,
};
pub use model::{phid_type, Hook, LastResult, RequestRow, RequestStatus, UnixTime};
pub use objects::{ObjectLookup, PhorgeObjects, Unseen};
pub use outcome::{
    attempt_write, hook_error_write, AttemptOutcome, DeliveryResult, HookError, LocalFailure,
    ProxyFailure, ResultWrite, TransportFailure, UriRefusal,
};
pub use pause::{HookPause, HookPauses};
pub use payload::{sign, verify, Payload};
pub use properties::{ErrorCode, ErrorType, Properties, PropertiesError, ORIGINAL_PROPERTIES_KEY};
pub use store::{
    BoxError, CandidateQuery, Claim, DueRow, HookLock, QueueCounts, QueueStats, Store, StoreError,
    Written,
};
pub use transport::{OutboundRequest, Resolution, Target, Transport};
pub use triage::{triage, triage_looked_up, HookLookup, Triage};
pub use wake_hints::WakeHints;
