//! The transport's settings: their environment variables (declared once
//! here, with their defaults and bounds), and the one check that turns
//! them into what [`crate::HyperTransport`] runs with
//! ([`TransportConfig::check`], giving a [`CheckedTransportConfig`]).
//! Every error names the setting (by its variable) so a message points at
//! what to fix.
//!
//! It reads no environment by itself: [`TransportConfig::from_env_with`]
//! takes a lookup function, so the daemon decides where values come from.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use ipnet::IpNet;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use webhook_core::setting::{
    text, Bounds, Lookup, Setting, SettingError, SettingInfo, Shown, Unit, Zero,
};

use crate::policy::phorge_deny_list;
use crate::proxy::Proxies;
pub use crate::proxy::{NO_PROXY, PROXY};

/// Phorge's signature header (newer Phorge sends
/// `X-Phorge-Webhook-Signature` instead; configure both to serve either).
pub const DEFAULT_SIGNATURE_HEADER: &str = "X-Phabricator-Webhook-Signature";

/// `GORGE_WEBHOOK_SIGNATURE_HEADERS`: comma-separated header names.
pub const SIGNATURE_HEADERS: Setting<Vec<String>> = Setting::new(
    "GORGE_WEBHOOK_SIGNATURE_HEADERS",
    DEFAULT_SIGNATURE_HEADER,
    "comma-separated signature header names",
    |raw| Ok(parse_list(raw)),
);
/// `GORGE_WEBHOOK_USER_AGENT`
pub const USER_AGENT: Setting<String> = Setting::new(
    "GORGE_WEBHOOK_USER_AGENT",
    "gorge-webhook/<version>",
    "User-Agent sent to receivers",
    text,
)
.computed(|| format!("gorge-webhook/{}", env!("CARGO_PKG_VERSION")));
/// `GORGE_WEBHOOK_MAX_REDIRECTS`: 0 = never follow.
pub const MAX_REDIRECTS: Setting<u32> = Setting::number(
    "GORGE_WEBHOOK_MAX_REDIRECTS",
    "20",
    "redirects followed; 0 = never",
    Bounds::at_least(0, Unit::Count),
);
/// `GORGE_WEBHOOK_CONNECT_TIMEOUT_MS`
pub const CONNECT_TIMEOUT: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_CONNECT_TIMEOUT_MS",
    "5000",
    "bound on one new connection",
    Bounds::at_least(1, Unit::Millis),
);
/// `GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS`
pub const RESOLVE_TIMEOUT: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS",
    "10000",
    "bound on resolving a hook's host",
    Bounds::at_least(1, Unit::Millis),
);
/// `GORGE_WEBHOOK_RESPONSE_BODY_LIMIT`: bytes.
pub const RESPONSE_BODY_LIMIT: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_RESPONSE_BODY_LIMIT",
    "65536",
    "response bytes read, then discarded",
    Bounds::at_least(0, Unit::Bytes),
);
/// The head a connection accepts when [`RESPONSE_HEAD_MAX`] is 0: cURL's
/// bound, in a buffer that grows only as a head needs.
pub const RESPONSE_HEAD_GROWING_MAX: usize = 102_400;
/// `GORGE_WEBHOOK_RESPONSE_HEAD_MAX`: bytes. Below 1 KiB an ordinary head
/// does not fit; above 100 KiB (cURL's bound on one header line) every
/// connection would hold as much.
pub const RESPONSE_HEAD_MAX: Setting<usize> = Setting::number(
    "GORGE_WEBHOOK_RESPONSE_HEAD_MAX",
    "0",
    "bytes of a response head (status line and headers) read at most, and each \
     connection's read buffer; 0 = a buffer growing from 8 KiB to cURL's 100 KiB \
     (4096 saves about 6 KiB per connection, but fails a receiver's longer head)",
    Bounds::between(1024, RESPONSE_HEAD_GROWING_MAX as u64, Unit::Bytes).or_zero(Zero::Off),
);
/// `GORGE_WEBHOOK_POOL_IDLE_SEC`
pub const POOL_IDLE: Setting<Duration> = Setting::number(
    "GORGE_WEBHOOK_POOL_IDLE_SEC",
    "30",
    "idle keep-alive connections are closed after this",
    Bounds::at_least(1, Unit::Secs),
);
/// `GORGE_WEBHOOK_OUTBOUND_DENY`: comma-separated CIDRs.
pub const OUTBOUND_DENY: Setting<Vec<IpNet>> = Setting::new(
    "GORGE_WEBHOOK_OUTBOUND_DENY",
    "Phorge's security.outbound-blacklist",
    "comma-separated CIDRs never called",
    parse_cidr_list,
)
.computed(phorge_deny_list)
.shown_as(|nets| {
    if *nets == phorge_deny_list() {
        format!(
            "Phorge's security.outbound-blacklist ({} networks)",
            nets.len()
        )
    } else {
        nets.shown()
    }
});
/// `GORGE_WEBHOOK_OUTBOUND_ALLOW`: comma-separated CIDRs.
pub const OUTBOUND_ALLOW: Setting<Vec<IpNet>> = Setting::new(
    "GORGE_WEBHOOK_OUTBOUND_ALLOW",
    "",
    "comma-separated CIDRs allowed despite the deny list",
    parse_cidr_list,
);
/// `GORGE_WEBHOOK_CA_FILE`: PEM file of extra trusted roots, read when the
/// variable is read.
pub const CA_FILE: Setting<Option<PemFile>> = Setting::new(
    "GORGE_WEBHOOK_CA_FILE",
    "",
    "PEM file of extra trusted roots for receivers",
    read_pem_file,
);
/// `GORGE_WEBHOOK_REQUEST_ID_HEADER`: empty = off.
pub const REQUEST_ID_HEADER: Setting<Option<String>> = Setting::new(
    "GORGE_WEBHOOK_REQUEST_ID_HEADER",
    "",
    "header carrying the request PHID (stable across retries); empty = off",
    |raw| {
        let name = raw.trim();
        Ok((!name.is_empty()).then(|| name.to_owned()))
    },
)
.shown_as(|name| name.clone().unwrap_or_else(|| "(off)".to_owned()));

/// A PEM file as [`CA_FILE`] reads it: where it is, and its text.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// The path the variable names.
    pub path: PathBuf,
    /// The file's bytes.
    pub pem: Vec<u8>,
}

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PemFile")
            .field("path", &self.path)
            .field("pem", &self.pem.len())
            .finish()
    }
}

/// Its path.
impl Shown for PemFile {
    fn shown(&self) -> String {
        self.path.display().to_string()
    }
}

/// The transport's variables, in `--help` order.
pub const VARIABLES: &[SettingInfo] = &[
    SIGNATURE_HEADERS.info(),
    USER_AGENT.info(),
    MAX_REDIRECTS.info(),
    CONNECT_TIMEOUT.info(),
    RESOLVE_TIMEOUT.info(),
    RESPONSE_BODY_LIMIT.info(),
    RESPONSE_HEAD_MAX.info(),
    POOL_IDLE.info(),
    OUTBOUND_DENY.info(),
    OUTBOUND_ALLOW.info(),
    CA_FILE.info(),
    REQUEST_ID_HEADER.info(),
    PROXY.info(),
    NO_PROXY.info(),
];

/// How the transport talks to receivers. `Default` gives Phorge's
/// behaviour; [`TransportConfig::check`] makes it what
/// [`crate::HyperTransport::new`] takes.
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
    /// A response head (status line and headers) longer than this fails
    /// the call as a protocol failure. It is also each connection's
    /// read buffer: at 512 calls in flight 4 KiB instead of hyper's
    /// adaptive 8 KiB and more saved about 3 MiB (docs/performance.md).
    /// Default 4 KiB, as nginx's default `proxy_buffer_size` on x86-64;
    /// cURL allows header lines of up to 100 KiB.
    pub response_head_max: usize,
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
    /// The egress proxies and the hosts exempt from them
    /// ([`crate::proxy`]). Default: none.
    pub proxies: Proxies,
}

impl Default for TransportConfig {
    /// Every variable unset (not validated; see [`Self::from_env_with`]).
    fn default() -> Self {
        Self::read(&|_| None)
            .unwrap_or_else(|err| panic!("a declared default does not parse: {err}"))
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
            .field("response_head_max", &self.response_head_max)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("outbound_deny", &self.outbound_deny.len())
            .field("outbound_allow", &self.outbound_allow)
            .field(
                "extra_root_certificates_pem",
                &self.extra_root_certificates_pem.len(),
            )
            .field("request_id_header", &self.request_id_header)
            .field("proxies", &self.proxies.shown())
            .finish()
    }
}

impl TransportConfig {
    /// Defaults, overridden by the variables `get` knows (see
    /// [`VARIABLES`]), then [checked](Self::check): refused here, where the
    /// variables are read, so a bad setting stops startup as a setting
    /// error and not later as a failed transport. `GORGE_WEBHOOK_CA_FILE`
    /// is a path and is read here. Pass `|name| std::env::var(name).ok()`
    /// for the process environment.
    pub fn from_env_with(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<CheckedTransportConfig, SettingError> {
        Self::read(&get)?.check()
    }

    /// Every variable through `get`, parsed but not checked as a whole.
    fn read(get: Lookup<'_>) -> Result<Self, SettingError> {
        Ok(Self {
            signature_headers: SIGNATURE_HEADERS.read(get)?,
            user_agent: USER_AGENT.read(get)?,
            max_redirects: MAX_REDIRECTS.read(get)?,
            connect_timeout: CONNECT_TIMEOUT.read(get)?,
            resolve_timeout: RESOLVE_TIMEOUT.read(get)?,
            response_body_limit: RESPONSE_BODY_LIMIT.read(get)?,
            response_head_max: RESPONSE_HEAD_MAX.read(get)?,
            pool_idle_timeout: POOL_IDLE.read(get)?,
            outbound_deny: OUTBOUND_DENY.read(get)?,
            outbound_allow: OUTBOUND_ALLOW.read(get)?,
            extra_root_certificates_pem: CA_FILE
                .read(get)?
                .map(|file| file.pem)
                .unwrap_or_default(),
            request_id_header: REQUEST_ID_HEADER.read(get)?,
            proxies: Proxies::read(get)?,
        })
    }

    /// The transport's one check of its settings: each value by its
    /// variable's declaration (it may have been built in code), the header
    /// names, and the CA file's certificates; what it makes of them goes
    /// along, so the transport is built without checking again.
    pub fn check(self) -> Result<CheckedTransportConfig, SettingError> {
        let parts = self.validate()?;
        Ok(CheckedTransportConfig {
            config: self,
            parts,
        })
    }

    /// Checks every setting and prepares what the transport runs with.
    fn validate(&self) -> Result<Validated, SettingError> {
        MAX_REDIRECTS.check(&self.max_redirects)?;
        CONNECT_TIMEOUT.check(&self.connect_timeout)?;
        RESOLVE_TIMEOUT.check(&self.resolve_timeout)?;
        RESPONSE_BODY_LIMIT.check(&self.response_body_limit)?;
        RESPONSE_HEAD_MAX.check(&self.response_head_max)?;
        POOL_IDLE.check(&self.pool_idle_timeout)?;
        if self.signature_headers.is_empty() {
            return Err(SettingError::new(
                SIGNATURE_HEADERS.name,
                "at least one header name is required",
            ));
        }
        let mut signature_headers: Vec<HeaderName> = Vec::new();
        for name in &self.signature_headers {
            let header = header_name(&SIGNATURE_HEADERS.info(), name)?;
            if signature_headers.contains(&header) {
                return Err(SettingError::new(
                    SIGNATURE_HEADERS.name,
                    format!("{} is listed twice", SIGNATURE_HEADERS.given(name)),
                ));
            }
            signature_headers.push(header);
        }
        let user_agent = HeaderValue::from_str(&self.user_agent).map_err(|_| {
            SettingError::new(
                USER_AGENT.name,
                format!(
                    "{} is not a valid header value",
                    USER_AGENT.given(&self.user_agent)
                ),
            )
        })?;
        let previous_signature_headers = previous_signature_headers(&signature_headers)?;
        let request_id_header = match &self.request_id_header {
            Some(name) => {
                let header = header_name(&REQUEST_ID_HEADER.info(), name)?;
                if signature_headers.contains(&header)
                    || previous_signature_headers.contains(&header)
                {
                    return Err(SettingError::new(
                        REQUEST_ID_HEADER.name,
                        format!(
                            "{} is also a signature header (or its -Previous twin)",
                            REQUEST_ID_HEADER.given(name)
                        ),
                    ));
                }
                Some(header)
            }
            None => None,
        };
        let mut extra_roots = RootCertStore::empty();
        for cert in parse_certificates(&self.extra_root_certificates_pem)? {
            extra_roots.add(cert).map_err(|err| {
                SettingError::new(
                    CA_FILE.name,
                    format!("certificate not usable as a root: {err}"),
                )
            })?;
        }
        Ok(Validated {
            signature_headers,
            previous_signature_headers,
            user_agent,
            request_id_header,
            extra_roots,
        })
    }
}

/// A [`TransportConfig`] that passed [`TransportConfig::check`], with what
/// the check made of it: what [`crate::HyperTransport::new`] takes.
#[derive(Clone)]
pub struct CheckedTransportConfig {
    config: TransportConfig,
    parts: Validated,
}

impl CheckedTransportConfig {
    /// The settings as checked.
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// The settings, and what the check made of them.
    pub(crate) fn into_parts(self) -> (TransportConfig, Validated) {
        (self.config, self.parts)
    }
}

impl fmt::Debug for CheckedTransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

/// The parts of a [`TransportConfig`] that validation turns into types.
#[derive(Debug, Clone)]
pub(crate) struct Validated {
    pub(crate) signature_headers: Vec<HeaderName>,
    /// Each signature header's `-Previous` twin, in the same order: the
    /// previous key's signature during a key's grace.
    pub(crate) previous_signature_headers: Vec<HeaderName>,
    pub(crate) user_agent: HeaderValue,
    pub(crate) request_id_header: Option<HeaderName>,
    /// `GORGE_WEBHOOK_CA_FILE`'s roots, each usable as one (webpki's are
    /// added when the transport is built).
    pub(crate) extra_roots: RootCertStore,
}

/// Headers the transport sets itself; a signature or request-id header by
/// one of these names would corrupt the request.
const RESERVED_HEADERS: &[HeaderName] = &[
    http::header::ACCEPT,
    http::header::ACCEPT_ENCODING,
    http::header::CONTENT_TYPE,
    http::header::CONTENT_LENGTH,
    http::header::HOST,
    http::header::USER_AGENT,
    http::header::TRANSFER_ENCODING,
    http::header::CONNECTION,
];

/// The Standard Webhooks headers' names, set by the transport too.
const STANDARD_HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];

/// Standard Webhooks' message id header (the request PHID).
pub(crate) const STANDARD_ID: HeaderName = HeaderName::from_static("webhook-id");
/// Standard Webhooks' timestamp header (the attempt's Unix time).
pub(crate) const STANDARD_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
/// Standard Webhooks' signature list header.
pub(crate) const STANDARD_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// The headers carrying the previous key's signature during a key's
/// grace: each signature header's name with `-Previous` appended, none of
/// them a signature header itself.
fn previous_signature_headers(signature: &[HeaderName]) -> Result<Vec<HeaderName>, SettingError> {
    signature
        .iter()
        .map(|name| {
            let twin = HeaderName::from_bytes(format!("{}-previous", name.as_str()).as_bytes())
                .map_err(|_| {
                    SettingError::new(
                        SIGNATURE_HEADERS.name,
                        "a -Previous twin is not a header name",
                    )
                })?;
            if signature.contains(&twin) {
                return Err(SettingError::new(
                    SIGNATURE_HEADERS.name,
                    "lists a header and its -Previous twin, which carries the previous key's \
                     signature during a key's grace",
                ));
            }
            Ok(twin)
        })
        .collect()
}

/// `name` as a header the variable `setting` may name.
fn header_name(setting: &SettingInfo, name: &str) -> Result<HeaderName, SettingError> {
    let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        SettingError::new(
            setting.name,
            format!("{} is not a valid header name", setting.given(name)),
        )
    })?;
    if RESERVED_HEADERS.contains(&header) || STANDARD_HEADERS.contains(&header.as_str()) {
        return Err(SettingError::new(
            setting.name,
            format!(
                "{} names a header the transport sets itself",
                setting.given(name)
            ),
        ));
    }
    Ok(header)
}

fn parse_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, SettingError> {
    if pem.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| SettingError::new(CA_FILE.name, format!("not PEM certificates: {err}")))?;
    if certs.is_empty() {
        return Err(SettingError::new(
            CA_FILE.name,
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
/// counts as a single-address network. The error is the reason, without
/// the variable (see [`OUTBOUND_ALLOW`], [`OUTBOUND_DENY`]).
pub fn parse_cidr_list(text: &str) -> Result<Vec<IpNet>, String> {
    parse_list(text)
        .into_iter()
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<std::net::IpAddr>().map(IpNet::from))
                .map(|net| net.trunc())
                .map_err(|_| "holds an item that is not a CIDR network or address".to_owned())
        })
        .collect()
}

fn read_pem_file(path: &str) -> Result<Option<PemFile>, String> {
    let path = path.trim();
    if path.is_empty() {
        return Ok(None);
    }
    let pem =
        std::fs::read(path).map_err(|err| format!("the file it names cannot be read: {err}"))?;
    Ok(Some(PemFile {
        path: PathBuf::from(path),
        pem,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::setting::table as env;

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
        assert_eq!(config.response_head_max, 0);
        // Pinned as numbers: each is written once, as its variable's
        // default text.
        assert_eq!(config.connect_timeout, Duration::from_millis(5000));
        assert_eq!(config.resolve_timeout, Duration::from_millis(10_000));
        assert_eq!(config.response_body_limit, 65_536);
        assert_eq!(config.pool_idle_timeout, Duration::from_secs(30));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn cidr_lists_parse_and_name_the_setting() {
        let nets = parse_cidr_list(" 127.0.0.1/32, ::1 ,10.0.0.9/8,").expect("parses");
        assert_eq!(
            nets,
            vec![
                "127.0.0.1/32".parse::<IpNet>().expect("net"),
                "::1/128".parse().expect("net"),
                "10.0.0.0/8".parse().expect("net"),
            ]
        );
        assert_eq!(parse_cidr_list("").expect("empty"), vec![]);
        let err = OUTBOUND_ALLOW
            .parse_text("127.0.0.1/33")
            .expect_err("bad prefix");
        assert_eq!(err.variable, OUTBOUND_ALLOW.name);
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
        let config = config.config();
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
            ("GORGE_WEBHOOK_SIGNATURE_HEADERS", "webhook-signature"),
            ("GORGE_WEBHOOK_SIGNATURE_HEADERS", "X-Sig, X-Sig-Previous"),
            ("GORGE_WEBHOOK_USER_AGENT", "line\nbreak"),
            ("GORGE_WEBHOOK_RESPONSE_HEAD_MAX", "1023"),
            ("GORGE_WEBHOOK_RESPONSE_HEAD_MAX", "102401"),
        ] {
            let err = TransportConfig::from_env_with(env(&[(name, value)]))
                .expect_err("must be rejected");
            assert_eq!(err.variable, name);
        }
    }

    #[test]
    fn a_bound_is_refused_naming_its_variable_and_the_bound() {
        for (name, value, message) in [
            (
                "GORGE_WEBHOOK_RESPONSE_HEAD_MAX",
                "1023",
                "GORGE_WEBHOOK_RESPONSE_HEAD_MAX: must be 0 or between 1024 and 102400 bytes",
            ),
            (
                "GORGE_WEBHOOK_CONNECT_TIMEOUT_MS",
                "0",
                "GORGE_WEBHOOK_CONNECT_TIMEOUT_MS: must be at least 1 ms",
            ),
            (
                "GORGE_WEBHOOK_POOL_IDLE_SEC",
                "0",
                "GORGE_WEBHOOK_POOL_IDLE_SEC: must be at least 1 s",
            ),
        ] {
            // Refused by the declaration as it reads the text, before any
            // check of the settings together.
            let declared = VARIABLES.iter().find(|v| v.name == name).expect("declared");
            let message = format!("{message} (set to {value:?})");
            let err = declared.shown(&env(&[(name, value)])).expect_err("refused");
            assert_eq!(err.to_string(), message);
            let err = TransportConfig::from_env_with(env(&[(name, value)])).expect_err(name);
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn the_ca_file_is_named_in_its_errors() {
        let dir = std::env::temp_dir().join(format!("transport-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").expect("write");
        for path in [
            garbage.display().to_string(),
            "/nonexistent/ca.pem".to_owned(),
        ] {
            let err = TransportConfig::from_env_with(env(&[("GORGE_WEBHOOK_CA_FILE", &path)]))
                .expect_err("refused");
            assert_eq!(err.variable, CA_FILE.name, "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn validation_rejects_unusable_settings() {
        let cases: Vec<(TransportConfig, &str)> = vec![
            (
                TransportConfig {
                    signature_headers: vec![],
                    ..TransportConfig::default()
                },
                SIGNATURE_HEADERS.name,
            ),
            (
                TransportConfig {
                    signature_headers: vec!["Bad Header".into()],
                    ..TransportConfig::default()
                },
                SIGNATURE_HEADERS.name,
            ),
            (
                TransportConfig {
                    signature_headers: vec!["X-A".into(), "x-a".into()],
                    ..TransportConfig::default()
                },
                SIGNATURE_HEADERS.name,
            ),
            (
                TransportConfig {
                    signature_headers: vec!["Content-Type".into()],
                    ..TransportConfig::default()
                },
                SIGNATURE_HEADERS.name,
            ),
            (
                TransportConfig {
                    request_id_header: Some("Accept-Encoding".into()),
                    ..TransportConfig::default()
                },
                REQUEST_ID_HEADER.name,
            ),
            (
                TransportConfig {
                    user_agent: "bad\nagent".into(),
                    ..TransportConfig::default()
                },
                USER_AGENT.name,
            ),
            (
                TransportConfig {
                    connect_timeout: Duration::ZERO,
                    ..TransportConfig::default()
                },
                CONNECT_TIMEOUT.name,
            ),
            (
                TransportConfig {
                    resolve_timeout: Duration::ZERO,
                    ..TransportConfig::default()
                },
                RESOLVE_TIMEOUT.name,
            ),
            (
                TransportConfig {
                    pool_idle_timeout: Duration::ZERO,
                    ..TransportConfig::default()
                },
                POOL_IDLE.name,
            ),
            (
                TransportConfig {
                    request_id_header: Some("X-Phabricator-Webhook-Signature".into()),
                    ..TransportConfig::default()
                },
                REQUEST_ID_HEADER.name,
            ),
            (
                TransportConfig {
                    extra_root_certificates_pem: b"not pem at all".to_vec(),
                    ..TransportConfig::default()
                },
                CA_FILE.name,
            ),
            (
                TransportConfig {
                    extra_root_certificates_pem:
                        b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec(),
                    ..TransportConfig::default()
                },
                CA_FILE.name,
            ),
        ];
        for (config, setting) in cases {
            let err = config.validate().expect_err("must be rejected");
            assert_eq!(err.variable, setting, "{err}");
        }
    }
}
