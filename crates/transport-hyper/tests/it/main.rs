//! Integration tests of `HyperTransport` against real loopback servers: one
//! binary, one module per concern.

mod credentials;
mod exchange;
mod failures;
mod history;
mod outbound;
mod proxy;
mod redirects;
mod standard;
mod support;
mod tls;
mod wire;
