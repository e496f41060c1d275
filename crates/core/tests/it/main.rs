//! Integration tests of webhook-core through its public API: the dispatcher
//! driven by a `ManualClock` (no test sleeps), and the multi-dispatcher
//! simulation over many seeds.

mod changes;
mod denied;
mod dispatcher;
mod history;
mod objects;
mod reliability;
mod retry_after;
mod signing;
mod simulation;
mod support;
