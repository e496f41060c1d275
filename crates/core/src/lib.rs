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
//! adoption, [`adoption::TaskQueue`]), [`Transport`] and [`Clock`]. [`MemoryStore`] and
//! [`ManualClock`] make the whole loop deterministic in tests.

#![warn(missing_docs)]

pub mod adoption;
pub mod breaker;
pub mod clock;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod dispatch;
mod error_chain;
pub mod events;
pub mod hold;
pub mod lock_name;
pub mod memory_store;
pub mod metrics;
pub mod model;
pub mod objects;
pub mod outcome;
pub mod pause;
pub mod payload;
mod phpjson;
pub mod properties;
pub mod setting;
pub mod signing;
pub mod store;
pub mod transport;
pub mod triage;
pub mod vectors;
pub mod windows;

pub use breaker::Breaker;
pub use clock::{Clock, ManualClock};
pub use dispatch::Dispatcher;
pub use error_chain::error_chain;
pub use events::{Event, EventKind, EventSink};
pub use hold::{ConfigUnreadable, PhorgeConfig, SilentMode};
pub use lock_name::hook_lock_name;
pub use memory_store::{MemoryStore, NewRequest};
pub use metrics::{Metrics, MetricsSnapshot};
pub use model::{phid_type, Hook, LastResult, RequestRow, RequestStatus, UnixTime};
pub use objects::{ObjectLookup, PhorgeObjects, Unseen};
pub use outcome::{
    DeliveryResult, HookError, LocalFailure, ResultWrite, TransportFailure, UriRefusal,
};
pub use pause::{HookPause, HookPauses};
pub use payload::{sign, verify, Payload};
pub use properties::{ErrorCode, ErrorType, Properties, PropertiesError};
pub use setting::{withheld, Bounds, Lookup, Setting, SettingError, SettingInfo, Unit, Zero};
pub use signing::{Signatures, Signer, SigningSettings, StandardScope, StandardSignature};
pub use store::{
    CandidateQuery, Claim, HookLock, QueueCounts, QueueStats, Store, StoreError, Written,
};
pub use transport::{OutboundRequest, Resolution, Target, Transport};
pub use triage::{triage, triage_looked_up, HookLookup, Triage};
pub use windows::{Cutoffs, Settings, WindowWarning, Windows};
