//! `webhook-daemon` as a library: the daemon's configuration, wiring,
//! diagnostics API, `/metrics`, live event stream, log output and demo, so
//! that the binary (`main.rs`), `webhook-admin`, the fuzz targets and the
//! tidy checks all use the daemon's own code instead of copies of it.
//!
//! The public surface is what those neighbours need: [`config`] (the
//! settings registry, [`config::DaemonConfig`], `--help`), [`api`] (the
//! diagnostics handler the fuzzer drives), [`metrics_text`] (the metric
//! families `/metrics` exposes), [`server::MAX_CONNECTIONS`],
//! [`server_clock`] (the database server's clock, which `webhook-admin
//! doctor` measures the host's skew against as the daemon does), and the
//! two entry points [`launch::run_daemon`] and [`launch::run_demo`].

#![warn(missing_docs)]

mod adoption;
pub mod api;
pub mod app;
mod clock;
pub mod config;
pub mod demo;
pub mod handoff;
pub mod launch;
pub mod live;
pub mod logging;
pub mod metrics_text;
pub mod server;
pub mod server_clock;
