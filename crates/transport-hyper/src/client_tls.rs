//! The client side of TLS as the transport sets it up: rustls with the
//! ring provider, its safe default protocol versions, and the roots (the
//! compiled-in webpki roots and `GORGE_WEBHOOK_CA_FILE`'s, already checked
//! with the other settings); and [`BuildError`], what can still go wrong
//! building the transport once its settings passed their check.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore};

/// Why a [`crate::HyperTransport`] could not be built from checked
/// settings. A bad setting is a `SettingError` from
/// [`crate::TransportConfig::check`], never one of these.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The TLS library refused its own crypto provider (no cipher suite
    /// for any safe protocol version): a fault of the build, not of any
    /// setting.
    #[error("the TLS provider cannot be used: {0}")]
    TlsProvider(#[source] rustls::Error),
}

/// The client configuration: `extra_roots` and webpki's, through ring.
pub(crate) fn client_config(extra_roots: RootCertStore) -> Result<ClientConfig, BuildError> {
    with_provider(rustls::crypto::ring::default_provider(), extra_roots)
}

fn with_provider(
    provider: CryptoProvider,
    mut roots: RootCertStore,
) -> Result<ClientConfig, BuildError> {
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Ok(ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(BuildError::TlsProvider)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_provider_builds_a_client() {
        assert!(client_config(RootCertStore::empty()).is_ok());
    }

    #[test]
    fn a_provider_failure_is_reported_as_what_it_is_not_as_the_ca_file() {
        // A provider without cipher suites: rustls refuses it.
        let broken = CryptoProvider {
            cipher_suites: Vec::new(),
            ..rustls::crypto::ring::default_provider()
        };
        let err = with_provider(broken, RootCertStore::empty()).expect_err("no suites");
        assert!(matches!(err, BuildError::TlsProvider(_)), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with("the TLS provider cannot be used"),
            "{text}"
        );
        assert!(!text.contains("CA_FILE"), "{text}");
    }
}
