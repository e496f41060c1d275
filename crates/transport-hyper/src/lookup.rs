//! Host name lookup with the one distinction protocol §5 step 5 needs: a name
//! that does not exist (a permanent `uri` hook error) versus a resolver that
//! could not answer right now (a failed attempt, `http`/6).
//!
//! [`SystemLookup`] asks the C library's `getaddrinfo` (so `/etc/hosts`,
//! `nsswitch.conf` and `resolv.conf` apply as they do for PHP's cURL) on
//! tokio's blocking pool. It judges nothing: the outbound check is
//! [`crate::OutboundPolicy`]'s job.

use std::fmt;
use std::net::IpAddr;

use async_trait::async_trait;
use dns_lookup::LookupErrorKind;

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The name does not exist or has no addresses (NXDOMAIN, NODATA).
    #[error("no such host")]
    NoSuchHost,
    /// The resolver failed this time (timeout, SERVFAIL, EAI_AGAIN, ...).
    #[error("name lookup failed: {0}")]
    Temporary(String),
}

/// Resolves host names to addresses. Implemented by [`SystemLookup`]; tests
/// and embedders may substitute their own (e.g. a fixed table).
#[async_trait]
pub trait NameLookup: Send + Sync + fmt::Debug + 'static {
    /// All addresses of `host` (a name, never an IP literal).
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, LookupError>;
}

/// `getaddrinfo`, run on tokio's blocking pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

#[async_trait]
impl NameLookup for SystemLookup {
    async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, LookupError> {
        let name = host.to_owned();
        let joined = tokio::task::spawn_blocking(move || {
            dns_lookup::lookup_host(&name).map(|addrs| addrs.collect::<Vec<_>>())
        })
        .await;
        match joined {
            Ok(Ok(addrs)) if addrs.is_empty() => Err(LookupError::NoSuchHost),
            Ok(Ok(addrs)) => Ok(dedup(addrs)),
            Ok(Err(err)) => Err(classify_gai(err.kind(), &err.to_string())),
            Err(join) => Err(LookupError::Temporary(join.to_string())),
        }
    }
}

/// Maps a `getaddrinfo` failure. Only "no such name" and "no data" mean the
/// host does not exist; everything else (EAI_AGAIN for timeouts and
/// SERVFAIL, EAI_FAIL, EAI_SYSTEM, ...) is treated as temporary so a DNS
/// outage never turns into a permanent hook error.
pub(crate) fn classify_gai(kind: LookupErrorKind, message: &str) -> LookupError {
    match kind {
        LookupErrorKind::NoName | LookupErrorKind::NoData => LookupError::NoSuchHost,
        _ => LookupError::Temporary(message.to_owned()),
    }
}

/// `getaddrinfo` lists an address once per socket type unless hinted; keep
/// the first occurrence so connection attempts keep the resolver's order.
fn dedup(addrs: Vec<IpAddr>) -> Vec<IpAddr> {
    let mut seen = Vec::with_capacity(addrs.len());
    for ip in addrs {
        if !seen.contains(&ip) {
            seen.push(ip);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_no_name_and_no_data_mean_unknown_host() {
        assert_eq!(
            classify_gai(LookupErrorKind::NoName, "x"),
            LookupError::NoSuchHost
        );
        assert_eq!(
            classify_gai(LookupErrorKind::NoData, "x"),
            LookupError::NoSuchHost
        );
        for kind in [
            LookupErrorKind::Again,
            LookupErrorKind::Fail,
            LookupErrorKind::System,
            LookupErrorKind::Memory,
            LookupErrorKind::IO,
        ] {
            assert_eq!(
                classify_gai(kind, "try again"),
                LookupError::Temporary("try again".into()),
                "{kind:?}"
            );
        }
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn real_gai_codes_map_through_dns_lookup() {
        let no_name = dns_lookup::LookupError::new(libc_eai::EAI_NONAME);
        let again = dns_lookup::LookupError::new(libc_eai::EAI_AGAIN);
        assert_eq!(classify_gai(no_name.kind(), "n"), LookupError::NoSuchHost);
        assert!(matches!(
            classify_gai(again.kind(), "a"),
            LookupError::Temporary(_)
        ));
    }

    /// glibc's values (netdb.h); the test only runs where they apply.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    mod libc_eai {
        pub const EAI_NONAME: i32 = -2;
        pub const EAI_AGAIN: i32 = -3;
    }

    #[test]
    fn dedup_keeps_first_occurrence_order() {
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        let b: IpAddr = "::1".parse().expect("ip");
        assert_eq!(dedup(vec![a, a, b, a, b]), vec![a, b]);
    }

    #[tokio::test]
    async fn localhost_resolves_from_the_hosts_file() {
        // `localhost` is answered from /etc/hosts ("files" comes first in
        // nsswitch), so no packet leaves the machine.
        let addrs = SystemLookup.lookup("localhost").await.expect("localhost");
        assert!(addrs.iter().all(|ip| ip.is_loopback()), "{addrs:?}");
        assert!(!addrs.is_empty());
    }
}
