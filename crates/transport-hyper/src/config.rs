//! The transport's settings: their defaults, their environment variables,
//! and the validation that turns them into what [`crate::HyperTransport`]
//! runs with. Every error names the setting (by its variable) so a message
//! points at what to fix.
//!
//! It reads no environment by itself: [`TransportConfig::from_env_with`]
//! takes a lookup function, so the daemon decides where values come from.

use std::fmt;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use ipnet::IpNet;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::policy::phorge_deny_list;

/// Phorge's signature header (newer Phorge sends
/// `X-Phorge-Webhook-Signature` instead; configure both to serve either).
pub const DEFAULT_SIGNATURE_HEADER: &str = "X-Phabricator-Webhook-Signature";

/// A transport setting, named by the environment variable that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportSetting {
    /// `GORGE_WEBHOOK_SIGNATURE_HEADERS`: comma-separated header names.
    SignatureHeaders,
    /// `GORGE_WEBHOOK_USER_AGENT`
    UserAgent,
    /// `GORGE_WEBHOOK_MAX_REDIRECTS`: 0 = never follow.
    MaxRedirects,
    /// `GORGE_WEBHOOK_CONNECT_TIMEOUT_MS`
    ConnectTimeout,
    /// `GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS`
    ResolveTimeout,
    /// `GORGE_WEBHOOK_RESPONSE_BODY_LIMIT`: bytes.
    ResponseBodyLimit,
    /// `GORGE_WEBHOOK_POOL_IDLE_SEC`
    PoolIdleTimeout,
    /// `GORGE_WEBHOOK_OUTBOUND_DENY`: comma-separated CIDRs.
    OutboundDeny,
    /// `GORGE_WEBHOOK_OUTBOUND_ALLOW`: comma-separated CIDRs.
    OutboundAllow,
    /// `GORGE_WEBHOOK_CA_FILE`: PEM file of extra trusted roots.
    ExtraRootCertificates,
    /// `GORGE_WEBHOOK_REQUEST_ID_HEADER`: empty = off.
    RequestIdHeader,
}

impl TransportSetting {
    /// The environment variable that sets it.
    pub fn env_name(self) -> &'static str {
        match self {
            Self::SignatureHeaders => "GORGE_WEBHOOK_SIGNATURE_HEADERS",
            Self::UserAgent => "GORGE_WEBHOOK_USER_AGENT",
            Self::MaxRedirects => "GORGE_WEBHOOK_MAX_REDIRECTS",
            Self::ConnectTimeout => "GORGE_WEBHOOK_CONNECT_TIMEOUT_MS",
            Self::ResolveTimeout => "GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS",
            Self::ResponseBodyLimit => "GORGE_WEBHOOK_RESPONSE_BODY_LIMIT",
            Self::PoolIdleTimeout => "GORGE_WEBHOOK_POOL_IDLE_SEC",
            Self::OutboundDeny => "GORGE_WEBHOOK_OUTBOUND_DENY",
            Self::OutboundAllow => "GORGE_WEBHOOK_OUTBOUND_ALLOW",
            Self::ExtraRootCertificates => "GORGE_WEBHOOK_CA_FILE",
            Self::RequestIdHeader => "GORGE_WEBHOOK_REQUEST_ID_HEADER",
        }
    }
}

impl fmt::Display for TransportSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.env_name())
    }
}

/// A transport setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {reason}")]
pub struct TransportConfigError {
    /// Which setting.
    pub setting: TransportSetting,
    /// What is wrong with it.
    pub reason: String,
}

impl TransportConfigError {
    fn new(setting: TransportSetting, reason: impl Into<String>) -> Self {
        Self {
            setting,
            reason: reason.into(),
        }
    }
}

/// How the transport talks to receivers. `Default` gives Phorge's
/// behaviour; [`crate::HyperTransport::new`] validates it.
#[derive(Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// Headers that each carry the payload signature. Default
    /// `["X-Phabricator-Webhook-Signature"]`.
    pub signature_headers: Vec<String>,
    /// `User-Agent` sent with every request. Default `gorge-webhook/<version>`.
    pub user_agent: String,
    /// Redirects followed per delivery, as cURL's `CURLOPT_MAXREDIRS` with
    /// PHP's 20 as default; 0 = never follow (a 3xx is the final status).
    pub max_redirects: u32,
    /// Bound on setting up one new connection (name lookup, TCP connect,
    /// TLS handshake). Default 5 s. Exceeding it is a timeout (cURL 28).
    pub connect_timeout: Duration,
    /// Bound on the name lookup of [`webhook_core::Transport::resolve`].
    /// Default 10 s. Exceeding it is a resolver failure (`http`/6).
    pub resolve_timeout: Duration,
    /// Response body bytes read before the rest is abandoned (the body is
    /// discarded either way; reading it to the end keeps the connection
    /// reusable). Default 64 KiB; 0 = never read it.
    pub response_body_limit: usize,
    /// How long an idle pooled connection is kept. Default 30 s.
    pub pool_idle_timeout: Duration,
    /// Networks never connected to. Default: Phorge's
    /// `security.outbound-blacklist` ([`crate::PHORGE_DENY_LIST`]).
    pub outbound_deny: Vec<IpNet>,
    /// Networks connected to even when the deny list matches. Default empty.
    pub outbound_allow: Vec<IpNet>,
    /// PEM text of extra trusted root certificates (private CAs, tests), on
    /// top of the compiled-in webpki roots. Default empty.
    pub extra_root_certificates_pem: Vec<u8>,
    /// Header carrying the request row's PHID, if set. Default off.
    pub request_id_header: Option<String>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            signature_headers: vec![DEFAULT_SIGNATURE_HEADER.to_owned()],
            user_agent: format!("gorge-webhook/{}", env!("CARGO_PKG_VERSION")),
            max_redirects: 20,
            connect_timeout: Duration::from_secs(5),
            resolve_timeout: Duration::from_secs(10),
            response_body_limit: 64 * 1024,
            pool_idle_timeout: Duration::from_secs(30),
            outbound_deny: phorge_deny_list(),
            outbound_allow: Vec::new(),
            extra_root_certificates_pem: Vec::new(),
            request_id_header: None,
        }
    }
}

impl fmt::Debug for TransportConfig {
    // The deny list is long and the PEM text is noise in a startup log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportConfig")
            .field("signature_headers", &self.signature_headers)
            .field("user_agent", &self.user_agent)
            .field("max_redirects", &self.max_redirects)
            .field("connect_timeout", &self.connect_timeout)
            .field("resolve_timeout", &self.resolve_timeout)
            .field("response_body_limit", &self.response_body_limit)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("outbound_deny", &self.outbound_deny.len())
            .field("outbound_allow", &self.outbound_allow)
            .field(
                "extra_root_certificates_pem",
                &self.extra_root_certificates_pem.len(),
            )
            .field("request_id_header", &self.request_id_header)
            .finish()
    }
}

impl TransportConfig {
    /// Defaults, overridden by the variables `get` knows (see
    /// [`TransportSetting::env_name`]), then checked as a whole, as
    /// [`crate::HyperTransport::new`] checks them. `GORGE_WEBHOOK_CA_FILE`
    /// is a path and is read here. Pass `|name| std::env::var(name).ok()` for the
    /// process environment.
    pub fn from_env_with(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, TransportConfigError> {
        use TransportSetting as S;
        let mut config = Self::default();
        let value = |setting: S| get(setting.env_name());
        if let Some(text) = value(S::SignatureHeaders) {
            config.signature_headers = parse_list(&text);
        }
        if let Some(text) = value(S::UserAgent) {
            config.user_agent = text;
        }
        if let Some(text) = value(S::MaxRedirects) {
            config.max_redirects = parse_number(S::MaxRedirects, &text)?;
        }
        if let Some(text) = value(S::ConnectTimeout) {
            config.connect_timeout = Duration::from_millis(parse_number(S::ConnectTimeout, &text)?);
        }
        if let Some(text) = value(S::ResolveTimeout) {
            config.resolve_timeout = Duration::from_millis(parse_number(S::ResolveTimeout, &text)?);
        }
        if let Some(text) = value(S::ResponseBodyLimit) {
            config.response_body_limit = parse_number(S::ResponseBodyLimit, &text)?;
        }
        if let Some(text) = value(S::PoolIdleTimeout) {
            config.pool_idle_timeout =
                Duration::from_secs(parse_number(S::PoolIdleTimeout, &text)?);
        }
        if let Some(text) = value(S::OutboundDeny) {
            config.outbound_deny = parse_cidr_list(S::OutboundDeny, &text)?;
        }
        if let Some(text) = value(S::OutboundAllow) {
            config.outbound_allow = parse_cidr_list(S::OutboundAllow, &text)?;
        }
        if let Some(path) = value(S::ExtraRootCertificates).filter(|p| !p.trim().is_empty()) {
            config.extra_root_certificates_pem = std::fs::read(path.trim()).map_err(|err| {
                TransportConfigError::new(
                    S::ExtraRootCertificates,
                    format!(
                        "the file it names cannot be read: {err} ({})",
                        webhook_core::withheld(&path)
                    ),
                )
            })?;
        }
        if let Some(text) = value(S::RequestIdHeader) {
            let name = text.trim();
            config.request_id_header = (!name.is_empty()).then(|| name.to_owned());
        }
        // Refused here, where the variables are read, so a bad setting stops
        // startup as a setting error and not later as a failed transport.
        config.validate()?;
        Ok(config)
    }

    /// Checks every setting and prepares what the transport runs with.
    pub(crate) fn validate(&self) -> Result<Validated, TransportConfigError> {
        use TransportSetting as S;
        if self.signature_headers.is_empty() {
            return Err(TransportConfigError::new(
                S::SignatureHeaders,
                "at least one header name is required",
            ));
        }
        let mut signature_headers: Vec<HeaderName> = Vec::new();
        for name in &self.signature_headers {
            let header = header_name(S::SignatureHeaders, name)?;
            if signature_headers.contains(&header) {
                return Err(TransportConfigError::new(
                    S::SignatureHeaders,
                    format!("{name:?} is listed twice"),
                ));
            }
            signature_headers.push(header);
        }
        let user_agent = HeaderValue::from_str(&self.user_agent)
            .map_err(|_| TransportConfigError::new(S::UserAgent, "not a valid header value"))?;
        if self.connect_timeout.is_zero() {
            return Err(TransportConfigError::new(
                S::ConnectTimeout,
                "must be above 0",
            ));
        }
        if self.resolve_timeout.is_zero() {
            return Err(TransportConfigError::new(
                S::ResolveTimeout,
                "must be above 0",
            ));
        }
        if self.pool_idle_timeout.is_zero() {
            return Err(TransportConfigError::new(
                S::PoolIdleTimeout,
                "must be above 0",
            ));
        }
        let request_id_header = match &self.request_id_header {
            Some(name) => {
                let header = header_name(S::RequestIdHeader, name)?;
                if signature_headers.contains(&header) {
                    return Err(TransportConfigError::new(
                        S::RequestIdHeader,
                        format!("{name:?} is also a signature header"),
                    ));
                }
                Some(header)
            }
            None => None,
        };
        let mut extra_roots = RootCertStore::empty();
        for cert in parse_certificates(&self.extra_root_certificates_pem)? {
            extra_roots.add(cert).map_err(|err| {
                TransportConfigError::new(
                    S::ExtraRootCertificates,
                    format!("certificate not usable as a root: {err}"),
                )
            })?;
        }
        Ok(Validated {
            signature_headers,
            user_agent,
            request_id_header,
            extra_roots,
        })
    }
}

/// The parts of a [`TransportConfig`] that validation turns into types.
#[derive(Debug)]
pub(crate) struct Validated {
    pub(crate) signature_headers: Vec<HeaderName>,
    pub(crate) user_agent: HeaderValue,
    pub(crate) request_id_header: Option<HeaderName>,
    /// `GORGE_WEBHOOK_CA_FILE`'s roots, each usable as one (webpki's are
    /// added when the transport is built).
    pub(crate) extra_roots: RootCertStore,
}

/// Headers the transport sets itself; a signature or request-id header by
/// one of these names would corrupt the request.
const RESERVED_HEADERS: &[HeaderName] = &[
    http::header::CONTENT_TYPE,
    http::header::CONTENT_LENGTH,
    http::header::HOST,
    http::header::USER_AGENT,
    http::header::TRANSFER_ENCODING,
    http::header::CONNECTION,
];

fn header_name(setting: TransportSetting, name: &str) -> Result<HeaderName, TransportConfigError> {
    let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        TransportConfigError::new(
            setting,
            format!(
                "is not a valid header name ({})",
                webhook_core::withheld(name)
            ),
        )
    })?;
    if RESERVED_HEADERS.contains(&header) {
        return Err(TransportConfigError::new(
            setting,
            format!(
                "names a header the transport sets itself ({})",
                webhook_core::withheld(name)
            ),
        ));
    }
    Ok(header)
}

fn parse_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TransportConfigError> {
    if pem.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| {
            TransportConfigError::new(
                TransportSetting::ExtraRootCertificates,
                format!("not PEM certificates: {err}"),
            )
        })?;
    if certs.is_empty() {
        return Err(TransportConfigError::new(
            TransportSetting::ExtraRootCertificates,
            "no CERTIFICATE block found",
        ));
    }
    Ok(certs)
}

/// Splits a comma-separated list, trimming blanks and dropping empty items.
pub fn parse_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses a comma-separated CIDR list such as
/// `GORGE_WEBHOOK_OUTBOUND_ALLOW="127.0.0.1/32, ::1/128"`. A bare address
/// counts as a single-address network.
pub fn parse_cidr_list(
    setting: TransportSetting,
    text: &str,
) -> Result<Vec<IpNet>, TransportConfigError> {
    parse_list(text)
        .into_iter()
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<std::net::IpAddr>().map(IpNet::from))
                .map(|net| net.trunc())
                .map_err(|_| {
                    TransportConfigError::new(
                        setting,
                        format!(
                            "holds an item that is not a CIDR network ({})",
                            webhook_core::withheld(&item)
                        ),
                    )
                })
        })
        .collect()
}

fn parse_number<T: std::str::FromStr>(
    setting: TransportSetting,
    text: &str,
) -> Result<T, TransportConfigError> {
    text.trim().parse().map_err(|_| {
        TransportConfigError::new(
            setting,
            format!(
                "is not a non-negative integer ({})",
                webhook_core::withheld(text)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn defaults_are_phorges() {
        let config = TransportConfig::default();
        assert_eq!(
            config.signature_headers,
            vec!["X-Phabricator-Webhook-Signature"]
        );
        assert_eq!(config.max_redirects, 20);
        assert_eq!(config.outbound_deny.len(), 29);
        assert!(config.outbound_allow.is_empty());
        assert_eq!(config.request_id_header, None);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn cidr_lists_parse_and_name_the_setting() {
        let nets = parse_cidr_list(
            TransportSetting::OutboundAllow,
            " 127.0.0.1/32, ::1 ,10.0.0.9/8,",
        )
        .expect("parses");
        assert_eq!(
            nets,
            vec![
                "127.0.0.1/32".parse::<IpNet>().expect("net"),
                "::1/128".parse().expect("net"),
                "10.0.0.0/8".parse().expect("net"),
            ]
        );
        assert_eq!(
            parse_cidr_list(TransportSetting::OutboundAllow, "").expect("empty"),
            vec![]
        );
        let err = parse_cidr_list(TransportSetting::OutboundAllow, "127.0.0.1/33")
            .expect_err("bad prefix");
        assert_eq!(err.setting, TransportSetting::OutboundAllow);
        assert!(
            err.to_string()
                .starts_with("GORGE_WEBHOOK_OUTBOUND_ALLOW: "),
            "{err}"
        );
    }

    #[test]
    fn from_env_overrides_defaults() {
        let config = TransportConfig::from_env_with(env(&[
            (
                "GORGE_WEBHOOK_SIGNATURE_HEADERS",
                "X-Phabricator-Webhook-Signature, X-Phorge-Webhook-Signature",
            ),
            ("GORGE_WEBHOOK_MAX_REDIRECTS", "0"),
            ("GORGE_WEBHOOK_CONNECT_TIMEOUT_MS", "250"),
            ("GORGE_WEBHOOK_RESPONSE_BODY_LIMIT", "1024"),
            ("GORGE_WEBHOOK_POOL_IDLE_SEC", "7"),
            ("GORGE_WEBHOOK_OUTBOUND_ALLOW", "127.0.0.1/32"),
            ("GORGE_WEBHOOK_REQUEST_ID_HEADER", "X-Gorge-Request"),
        ]))
        .expect("valid");
        assert_eq!(config.signature_headers.len(), 2);
        assert_eq!(config.max_redirects, 0);
        assert_eq!(config.connect_timeout, Duration::from_millis(250));
        assert_eq!(config.response_body_limit, 1024);
        assert_eq!(config.pool_idle_timeout, Duration::from_secs(7));
        assert_eq!(config.outbound_allow.len(), 1);
        assert_eq!(config.outbound_deny.len(), 29);
        assert_eq!(config.request_id_header.as_deref(), Some("X-Gorge-Request"));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (name, value) in [
            ("GORGE_WEBHOOK_MAX_REDIRECTS", "-1"),
            ("GORGE_WEBHOOK_CONNECT_TIMEOUT_MS", "soon"),
            ("GORGE_WEBHOOK_OUTBOUND_DENY", "10.0.0.0/8,nope"),
            ("GORGE_WEBHOOK_CA_FILE", "/nonexistent/ca.pem"),
            // These parse, and are refused by the check that follows.
            ("GORGE_WEBHOOK_CONNECT_TIMEOUT_MS", "0"),
            ("GORGE_WEBHOOK_SIGNATURE_HEADERS", "Content-Type"),
            ("GORGE_WEBHOOK_USER_AGENT", "line\nbreak"),
        ] {
            let err = TransportConfig::from_env_with(env(&[(name, value)]))
                .expect_err("must be rejected");
            assert_eq!(err.setting.env_name(), name);
        }
    }

    #[test]
    fn validation_rejects_unusable_settings() {
        use TransportSetting as S;
        let cases: Vec<(TransportConfig, S)> = vec![
            (
                TransportConfig {
                    signature_headers: vec![],
                    ..TransportConfig::default()
                },
                S::SignatureHeaders,
            ),
            (
                TransportConfig {
                    signature_headers: vec!["Bad Header".into()],
                    ..TransportConfig::default()
                },
                S::SignatureHeaders,
            ),
            (
                TransportConfig {
                    signature_headers: vec!["X-A".into(), "x-a".into()],
                    ..TransportConfig::default()
                },
                S::SignatureHeaders,
            ),
            (
                TransportConfig {
                    signature_headers: vec!["Content-Type".into()],
                    ..TransportConfig::default()
                },
                S::SignatureHeaders,
            ),
            (
                TransportConfig {
                    user_agent: "bad\nagent".into(),
                    ..TransportConfig::default()
                },
                S::UserAgent,
            ),
            (
                TransportConfig {
                    connect_timeout: Duration::ZERO,
                    ..TransportConfig::default()
                },
                S::ConnectTimeout,
            ),
            (
                TransportConfig {
                    resolve_timeout: Duration::ZERO,
                    ..TransportConfig::default()
                },
                S::ResolveTimeout,
            ),
            (
                TransportConfig {
                    pool_idle_timeout: Duration::ZERO,
                    ..TransportConfig::default()
                },
                S::PoolIdleTimeout,
            ),
            (
                TransportConfig {
                    request_id_header: Some("X-Phabricator-Webhook-Signature".into()),
                    ..TransportConfig::default()
                },
                S::RequestIdHeader,
            ),
            (
                TransportConfig {
                    extra_root_certificates_pem: b"not pem at all".to_vec(),
                    ..TransportConfig::default()
                },
                S::ExtraRootCertificates,
            ),
            (
                TransportConfig {
                    extra_root_certificates_pem:
                        b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec(),
                    ..TransportConfig::default()
                },
                S::ExtraRootCertificates,
            ),
        ];
        for (config, setting) in cases {
            let err = config.validate().expect_err("must be rejected");
            assert_eq!(err.setting, setting, "{err}");
        }
    }
}
