//! `webhook-daemon` as a library: the daemon's configuration, wiring,
//! diagnostics API, `/metrics`, live event stream, log output and demo, so
//! that the binary (`main.rs`), `webhook-admin`, the fuzz targets and the
//! tidy checks all use the daemon's own code instead of copies of it.
//!
//! The public surface is what those neighbours need: [`config`] (the
//! settings registry, [`config::DaemonConfig`], `--help`), [`server_clock`]
//! (the database server's clock, which `webhook-admin doctor` measures the
//! host's skew against as the daemon does), and, with the feature `server`
//! (on by default), `api` (the diagnostics handler the fuzzer drives),
//! `metrics_text` (the metric families `/metrics` exposes),
//! `server::MAX_CONNECTIONS`, and the two entry points
//! `launch::run_daemon` and `launch::run_demo`. Without `server` the
//! library is only [`config`] and the measurement in [`server_clock`]:
//! `webhook-admin` takes it that way, so it links neither the daemon's
//! HTTP server nor its allocator.

#![warn(missing_docs)]

#[cfg(feature = "server")]
mod access;
#[cfg(feature = "server")]
mod adoption;
#[cfg(feature = "server")]
pub mod api;
#[cfg(feature = "server")]
pub mod app;
#[cfg(feature = "server")]
mod clock;
pub mod config;
#[cfg(feature = "server")]
pub mod demo;
#[cfg(feature = "server")]
pub mod handoff;
#[cfg(feature = "server")]
pub mod history;
#[cfg(feature = "server")]
pub mod launch;
#[cfg(feature = "server")]
pub mod live;
#[cfg(feature = "server")]
pub mod logging;
#[cfg(feature = "server")]
pub mod metrics_text;
#[cfg(feature = "server")]
mod pace;
#[cfg(feature = "server")]
pub mod server;
pub mod server_clock;
