//! The egress proxy: which proxy, if any, a call goes through, read the way
//! operators already set it for cURL (which Phorge's worker uses) and Go
//! programs (the service this daemon replaces), and decided here once for
//! every hop ([`Proxies::route`]).
//!
//! Where the settings come from:
//!
//! - `GORGE_WEBHOOK_PROXY`: a proxy URL for every call, `none` for no
//!   proxy, or empty/unset to read the environment: `https_proxy` or
//!   `HTTPS_PROXY` for `https` targets, `http_proxy` or `HTTP_PROXY` for
//!   `http` targets. The lower-case name wins when both are set (as cURL
//!   reads them); an empty value counts as unset (as Go reads them);
//!   `HTTP_PROXY` (which cURL never reads) is ignored when
//!   `REQUEST_METHOD` is set: under CGI a request's `Proxy:` header
//!   arrives as it.
//! - `GORGE_WEBHOOK_NO_PROXY`: the hosts called directly, `none` for no
//!   exemption, or empty/unset for `no_proxy` / `NO_PROXY` (same
//!   precedence).
//!
//! A proxy URL is `http://` or `https://` (TLS to the proxy), with the
//! scheme's default port when none is given (80, 443; a bare `host:port`
//! is `http://`), and optional user-info sent as `Proxy-Authorization:
//! Basic` — never shown, logged or put in an error. A no-proxy list is
//! items separated by commas or blanks: `*` (every host), an IP address,
//! a CIDR network, or a name, which matches itself and every name under
//! it (`example.com` and `.example.com` both match `a.example.com`); a
//! `:port` after a name or a bracketed address is ignored. Names and
//! addresses are matched as the hook URI writes its host, as cURL matches
//! them: a name is not resolved to be compared with a CIDR.
//!
//! How a proxied call goes ([`Route`]): `https` targets through a
//! `CONNECT` tunnel to the address the outbound check passed (TLS inside
//! it, with the hook's host name as SNI and `Host`); `http` targets as an
//! absolute-form request naming the hook's host, checked first.

use std::fmt;
use std::net::IpAddr;

use http::HeaderValue;
use ipnet::IpNet;
use webhook_core::setting::{Lookup, Setting, SettingError, Shown};

use crate::uri::HookUri;

/// `GORGE_WEBHOOK_PROXY`. A secret: its user-info is a credential, so
/// `config` shows the proxy in use by [`Proxies::shown`] instead.
pub const PROXY: Setting<ProxyChoice> = Setting::new(
    "GORGE_WEBHOOK_PROXY",
    "",
    "egress proxy URL (http:// or https://) for every call; none = no proxy; \
     empty = the environment's https_proxy / HTTPS_PROXY and http_proxy / HTTP_PROXY",
    ProxyChoice::parse,
)
.secret();

/// `GORGE_WEBHOOK_NO_PROXY`.
pub const NO_PROXY: Setting<NoProxyChoice> = Setting::new(
    "GORGE_WEBHOOK_NO_PROXY",
    "",
    "hosts, domains, addresses and CIDRs called without the proxy; none = none; \
     empty = the environment's no_proxy / NO_PROXY",
    NoProxyChoice::parse,
);

/// The environment's proxy variables, lower-case name first.
const HTTPS_PROXY_VARS: [&str; 2] = ["https_proxy", "HTTPS_PROXY"];
const HTTP_PROXY_VARS: [&str; 2] = ["http_proxy", "HTTP_PROXY"];
const NO_PROXY_VARS: [&str; 2] = ["no_proxy", "NO_PROXY"];

/// What `GORGE_WEBHOOK_PROXY` says.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ProxyChoice {
    /// Read the environment's proxy variables.
    Environment,
    /// No proxy, whatever the environment says.
    Off,
    /// This proxy for every call.
    Url(ProxyServer),
}

impl ProxyChoice {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim() {
            "" => Ok(Self::Environment),
            text if text.eq_ignore_ascii_case("none") => Ok(Self::Off),
            text => ProxyServer::parse(text, PROXY.name).map(Self::Url),
        }
    }
}

/// The proxy, without credentials.
impl Shown for ProxyChoice {
    fn shown(&self) -> String {
        match self {
            Self::Environment => "(the environment's)".to_owned(),
            Self::Off => "none".to_owned(),
            Self::Url(server) => server.shown(),
        }
    }
}

/// What `GORGE_WEBHOOK_NO_PROXY` says.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum NoProxyChoice {
    /// Read the environment's `no_proxy` / `NO_PROXY`.
    Environment,
    /// This list (`none`: empty), whatever the environment says.
    List(NoProxy),
}

impl NoProxyChoice {
    fn parse(raw: &str) -> Result<Self, String> {
        match raw.trim() {
            "" => Ok(Self::Environment),
            text if text.eq_ignore_ascii_case("none") => Ok(Self::List(NoProxy::default())),
            text => NoProxy::parse(text).map(Self::List),
        }
    }
}

/// The list.
impl Shown for NoProxyChoice {
    fn shown(&self) -> String {
        match self {
            Self::Environment => "(the environment's)".to_owned(),
            Self::List(list) => list.shown(),
        }
    }
}

/// One proxy: where it is, whether it speaks TLS, and its credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyServer {
    tls: bool,
    host: String,
    port: u16,
    /// `Proxy-Authorization`, marked sensitive.
    authorization: Option<HeaderValue>,
    /// The variable it was read from.
    from: &'static str,
}

impl fmt::Debug for ProxyServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

impl ProxyServer {
    /// Parses a proxy URL read from `from`; the error never quotes the
    /// text, which may hold a password.
    pub(crate) fn parse(text: &str, from: &'static str) -> Result<Self, String> {
        let with_scheme = if text.contains("://") {
            text.to_owned()
        } else {
            format!("http://{text}")
        };
        let scheme = with_scheme.split("://").next().unwrap_or_default();
        if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
            return Err(format!(
                "the proxy's scheme {:?} is not http or https (SOCKS proxies are not supported)",
                scheme.to_ascii_lowercase()
            ));
        }
        let uri = HookUri::parse(&with_scheme).map_err(|why| format!("not a proxy URL: {why}"))?;
        let path = uri.uri().path_and_query().map_or("", |p| p.as_str());
        if !matches!(path, "" | "/") {
            return Err("a proxy URL has no path".to_owned());
        }
        Ok(Self {
            tls: uri.scheme() == "https",
            host: uri.host().to_ascii_lowercase(),
            port: uri.port(),
            authorization: uri.user_info().and_then(|info| info.basic()),
            from,
        })
    }

    /// `scheme://host:port`, and whether credentials go along (never
    /// what they are).
    pub fn shown(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let host = match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => format!("[{}]", self.host),
            _ => self.host.clone(),
        };
        let credentials = if self.authorization.is_some() {
            " (with credentials)"
        } else {
            ""
        };
        format!("{scheme}://{host}:{}{credentials}", self.port)
    }

    /// The variable it was read from.
    pub fn from(&self) -> &'static str {
        self.from
    }

    /// Whether the connection to the proxy is TLS.
    pub(crate) fn tls(&self) -> bool {
        self.tls
    }

    /// The proxy's host, without brackets.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The proxy's port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The `Proxy-Authorization` value, when the URL carried user-info.
    pub(crate) fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }
}

/// The hosts called without the proxy.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct NoProxy {
    everything: bool,
    /// Names, lower-case, without a leading dot.
    names: Vec<String>,
    nets: Vec<IpNet>,
}

impl NoProxy {
    /// Parses a list; the error names the item refused.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut list = Self::default();
        for item in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|item| !item.is_empty())
        {
            if item == "*" {
                list.everything = true;
            } else if let Some(net) = address_item(item) {
                list.nets.push(net);
            } else {
                list.names.push(name_item(item).ok_or_else(|| {
                    format!("item {item:?} is not a host name, domain, IP address or CIDR network")
                })?);
            }
        }
        Ok(list)
    }

    /// Whether `host` (as a URI writes it, without brackets) is called
    /// directly.
    pub fn exempts(&self, host: &str) -> bool {
        if self.everything {
            return true;
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.nets.iter().any(|net| net.contains(&ip));
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.names.iter().any(|name| {
            host == *name
                || host
                    .strip_suffix(name.as_str())
                    .is_some_and(|head| head.ends_with('.'))
        })
    }

    /// The list as `config` shows it.
    pub fn shown(&self) -> String {
        if self.everything {
            return "* (every host)".to_owned();
        }
        let items: Vec<String> = self
            .names
            .iter()
            .cloned()
            .chain(self.nets.iter().map(ToString::to_string))
            .collect();
        if items.is_empty() {
            "(none)".to_owned()
        } else {
            items.join(",")
        }
    }
}

/// An address or CIDR item, brackets and a port after brackets allowed.
fn address_item(item: &str) -> Option<IpNet> {
    let bare = match item.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(inner, _)| inner)?,
        None => item,
    };
    bare.parse::<IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| bare.parse::<IpAddr>().map(IpNet::from))
        .ok()
        .or_else(|| {
            // `10.0.0.1:8080`: an IPv4 address with a port.
            let (addr, port) = bare.rsplit_once(':')?;
            port.parse::<u16>().ok()?;
            addr.parse::<std::net::Ipv4Addr>()
                .ok()
                .map(|ip| IpNet::from(IpAddr::V4(ip)))
        })
}

/// A name item: lower-case, without `*.`, a leading dot or a `:port`.
fn name_item(item: &str) -> Option<String> {
    let name = item.strip_prefix("*.").unwrap_or(item);
    let name = name.strip_prefix('.').unwrap_or(name);
    let name = match name.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => name,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    valid.then_some(name)
}

/// How one hop goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// Straight to the checked address.
    Direct,
    /// Through the proxy, in a `CONNECT` tunnel to the checked address
    /// (`https` targets).
    Tunnel(&'a ProxyServer),
    /// Through the proxy as an absolute-form request (`http` targets).
    Forward(&'a ProxyServer),
}

/// The proxies in force: one for `http` targets, one for `https`
/// targets, and the hosts exempt from both.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Proxies {
    http: Option<ProxyServer>,
    https: Option<ProxyServer>,
    no_proxy: NoProxy,
    /// Where the no-proxy list was read, when it holds anything.
    no_proxy_from: Option<&'static str>,
}

impl Proxies {
    /// No proxy at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// The proxies `GORGE_WEBHOOK_PROXY`, `GORGE_WEBHOOK_NO_PROXY` and,
    /// where they defer to it, the environment's variables set; an error
    /// names the variable whose value is refused.
    pub fn read(get: Lookup<'_>) -> Result<Self, SettingError> {
        let (no_proxy, no_proxy_from) = match NO_PROXY.read(get)? {
            NoProxyChoice::List(list) => (list, Some(NO_PROXY.name)),
            NoProxyChoice::Environment => match environment(get, &NO_PROXY_VARS) {
                Some((name, text)) => (
                    NoProxy::parse(&text).map_err(|why| SettingError::new(name, why))?,
                    Some(name),
                ),
                None => (NoProxy::default(), None),
            },
        };
        let (http, https) = match PROXY.read(get)? {
            ProxyChoice::Off => (None, None),
            ProxyChoice::Url(server) => (Some(server.clone()), Some(server)),
            ProxyChoice::Environment => {
                let http_vars: &[&'static str] = if get("REQUEST_METHOD").is_some() {
                    &HTTP_PROXY_VARS[..1]
                } else {
                    &HTTP_PROXY_VARS
                };
                (
                    environment_proxy(get, http_vars)?,
                    environment_proxy(get, &HTTPS_PROXY_VARS)?,
                )
            }
        };
        Ok(Self {
            http,
            https,
            no_proxy,
            no_proxy_from,
        })
    }

    /// Every call through `server`, except to hosts `no_proxy` exempts.
    pub fn every_call_through(server: &str, no_proxy: &str) -> Result<Self, SettingError> {
        let get = |name: &str| match name {
            "GORGE_WEBHOOK_PROXY" => Some(server.to_owned()),
            "GORGE_WEBHOOK_NO_PROXY" => Some(no_proxy.to_owned()),
            _ => None,
        };
        Self::read(&get)
    }

    /// How a hop to `host` (without brackets) goes out, for an `https`
    /// target or an `http` one.
    pub(crate) fn route(&self, https: bool, host: &str) -> Route<'_> {
        let server = if https { &self.https } else { &self.http };
        match server {
            Some(server) if !self.no_proxy.exempts(host) => {
                if https {
                    Route::Tunnel(server)
                } else {
                    Route::Forward(server)
                }
            }
            _ => Route::Direct,
        }
    }

    /// The proxies in force, each once.
    pub(crate) fn servers(&self) -> Vec<&ProxyServer> {
        let mut servers: Vec<&ProxyServer> = Vec::new();
        for server in [&self.https, &self.http].into_iter().flatten() {
            if !servers.contains(&server) {
                servers.push(server);
            }
        }
        servers
    }

    /// Whether any proxy is in force.
    pub fn any(&self) -> bool {
        self.http.is_some() || self.https.is_some()
    }

    /// Whether a call to the hook URI `uri` goes through a proxy.
    pub fn proxied(&self, uri: &str) -> bool {
        HookUri::parse(uri)
            .is_ok_and(|hook| self.route(hook.scheme() == "https", hook.host()) != Route::Direct)
    }

    /// How a call to the hook URI `uri` goes out, in words for `explain`
    /// and `doctor`; `None` when no proxy is in force.
    pub fn describe(&self, uri: &str) -> Option<String> {
        if !self.any() {
            return None;
        }
        let Ok(hook) = HookUri::parse(uri) else {
            return Some("not called: the URI is malformed".to_owned());
        };
        Some(match self.route(hook.scheme() == "https", hook.host()) {
            Route::Tunnel(server) => format!(
                "through the proxy {} ({}): a CONNECT tunnel to the address checked here",
                server.shown(),
                server.from
            ),
            Route::Forward(server) => format!(
                "through the proxy {} ({}): the host is checked here, the proxy resolves it again",
                server.shown(),
                server.from
            ),
            Route::Direct if self.no_proxy.exempts(hook.host()) => format!(
                "directly: {} exempts {}",
                self.no_proxy_from.unwrap_or("the no-proxy list"),
                hook.host()
            ),
            Route::Direct => format!("directly: no proxy is set for {} targets", hook.scheme()),
        })
    }

    /// The proxy for each scheme and the exempt hosts, as `config` shows
    /// them (credentials withheld).
    pub fn shown(&self) -> String {
        let one = |server: &Option<ProxyServer>| match server {
            Some(server) => format!("{} from {}", server.shown(), server.from),
            None => "(none)".to_owned(),
        };
        if !self.any() {
            return "no proxy".to_owned();
        }
        format!("https: {}; http: {}", one(&self.https), one(&self.http))
    }

    /// The exempt hosts as `config` shows them, with where they were read.
    pub fn no_proxy_shown(&self) -> String {
        match self.no_proxy_from {
            Some(from) => format!("{} from {from}", self.no_proxy.shown()),
            None => self.no_proxy.shown(),
        }
    }
}

/// The first of `names` set to something other than blanks.
fn environment(get: Lookup<'_>, names: &[&'static str]) -> Option<(&'static str, String)> {
    names.iter().find_map(|name| {
        get(name)
            .filter(|value| !value.trim().is_empty())
            .map(|value| (*name, value.trim().to_owned()))
    })
}

fn environment_proxy(
    get: Lookup<'_>,
    names: &[&'static str],
) -> Result<Option<ProxyServer>, SettingError> {
    environment(get, names)
        .map(|(name, text)| {
            ProxyServer::parse(&text, name).map_err(|why| SettingError::new(name, why))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::setting::table;

    fn read(pairs: &[(&str, &str)]) -> Result<Proxies, SettingError> {
        Proxies::read(&table(pairs))
    }

    fn route_of(proxies: &Proxies, uri: &str) -> Option<String> {
        let hook = HookUri::parse(uri).expect("uri");
        match proxies.route(hook.scheme() == "https", hook.host()) {
            Route::Direct => None,
            Route::Tunnel(server) => Some(format!("tunnel {}", server.shown())),
            Route::Forward(server) => Some(format!("forward {}", server.shown())),
        }
    }

    #[test]
    fn the_environment_is_read_lower_case_first_and_empty_counts_as_unset() {
        let proxies = read(&[
            ("https_proxy", "http://lower:3128"),
            ("HTTPS_PROXY", "http://upper:3128"),
            ("http_proxy", ""),
            ("HTTP_PROXY", "upper-http:8080"),
        ])
        .expect("read");
        assert_eq!(
            route_of(&proxies, "https://example.com/hook").as_deref(),
            Some("tunnel http://lower:3128")
        );
        assert_eq!(
            route_of(&proxies, "http://example.com/hook").as_deref(),
            Some("forward http://upper-http:8080")
        );
        assert_eq!(
            proxies.https.as_ref().map(ProxyServer::from),
            Some("https_proxy")
        );
    }

    #[test]
    fn http_proxy_is_ignored_under_cgi_as_curl_and_go_ignore_it() {
        let proxies =
            read(&[("HTTP_PROXY", "http://p:1"), ("REQUEST_METHOD", "POST")]).expect("read");
        assert_eq!(route_of(&proxies, "http://example.com/"), None);
        let proxies =
            read(&[("http_proxy", "http://p:1"), ("REQUEST_METHOD", "POST")]).expect("read");
        assert!(route_of(&proxies, "http://example.com/").is_some());
    }

    #[test]
    fn the_daemon_s_own_variables_override_the_environment() {
        let env = [
            ("HTTPS_PROXY", "http://env:3128"),
            ("NO_PROXY", "example.com"),
        ];
        let mut pairs = env.to_vec();
        pairs.push(("GORGE_WEBHOOK_PROXY", "https://own:8443"));
        let proxies = read(&pairs).expect("read");
        assert_eq!(
            route_of(&proxies, "http://other.org/").as_deref(),
            Some("forward https://own:8443")
        );
        assert_eq!(route_of(&proxies, "https://a.example.com/"), None);
        pairs.push(("GORGE_WEBHOOK_NO_PROXY", "none"));
        let proxies = read(&pairs).expect("read");
        assert!(route_of(&proxies, "https://a.example.com/").is_some());
        let off = read(&[
            ("HTTPS_PROXY", "http://env:3128"),
            ("GORGE_WEBHOOK_PROXY", "none"),
        ])
        .expect("read");
        assert!(!off.any());
        assert_eq!(route_of(&off, "https://example.com/"), None);
    }

    #[test]
    fn no_proxy_matches_hosts_domain_suffixes_addresses_and_networks() {
        let list = NoProxy::parse(
            "internal.corp, .example.com *.svc.local,10.0.0.0/8 192.168.1.7,[::1]:8080,host:81",
        )
        .expect("parse");
        for host in [
            "internal.corp",
            "a.internal.corp",
            "example.com",
            "deep.a.example.com",
            "x.svc.local",
            "10.2.3.4",
            "192.168.1.7",
            "::1",
            "HOST",
            "example.com.",
        ] {
            assert!(list.exempts(host), "{host}");
        }
        for host in [
            "notinternal.corp",
            "example.com.evil.org",
            "11.0.0.1",
            "192.168.1.8",
            "::2",
            "hostile",
        ] {
            assert!(!list.exempts(host), "{host}");
        }
        let everything = NoProxy::parse("foo,*").expect("parse");
        assert!(everything.exempts("anything.org") && everything.exempts("8.8.8.8"));
    }

    #[test]
    fn bad_values_name_their_variable_and_never_show_a_password() {
        let err = read(&[("HTTPS_PROXY", "socks5://user:secret@p:1080")]).expect_err("socks");
        assert_eq!(err.variable, "HTTPS_PROXY");
        assert!(err.reason.contains("not http or https"), "{err}");
        assert!(!err.to_string().contains("secret"));
        let err = read(&[("GORGE_WEBHOOK_PROXY", "http://user:secret@p:99999")]).expect_err("port");
        assert_eq!(err.variable, "GORGE_WEBHOOK_PROXY");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = read(&[("no_proxy", "ok.org, bad/name")]).expect_err("no_proxy");
        assert_eq!(err.variable, "no_proxy");
        assert!(err.reason.contains("\"bad/name\""), "{err}");
        let err = read(&[("http_proxy", "http://p:3128/path")]).expect_err("path");
        assert_eq!(err.variable, "http_proxy");
    }

    #[test]
    fn credentials_become_proxy_authorization_and_are_never_shown() {
        let server =
            ProxyServer::parse("http://us%40er:p%3Ass@proxy.corp", "HTTPS_PROXY").expect("parse");
        assert_eq!(server.port(), 80);
        let value = server.authorization().expect("credentials");
        assert!(value.is_sensitive());
        // base64("us@er:p:ss")
        assert_eq!(value.to_str().ok(), Some("Basic dXNAZXI6cDpzcw=="));
        let shown = format!(
            "{} {server:?} {}",
            server.shown(),
            Proxies::every_call_through("http://u:pw@p:1", "")
                .expect("read")
                .shown()
        );
        assert!(
            !shown.contains("pw") && !shown.contains("p%3Ass"),
            "{shown}"
        );
        assert_eq!(server.shown(), "http://proxy.corp:80 (with credentials)");
        let tls = ProxyServer::parse("https://[::1]", "x").expect("parse");
        assert_eq!(tls.shown(), "https://[::1]:443");
    }

    #[test]
    fn describe_says_how_a_hook_goes_out() {
        let proxies = read(&[
            ("HTTPS_PROXY", "http://p:3128"),
            ("NO_PROXY", "internal.corp"),
        ])
        .expect("read");
        assert_eq!(
            proxies.describe("https://hooks.example.com/x").as_deref(),
            Some(
                "through the proxy http://p:3128 (HTTPS_PROXY): a CONNECT tunnel to the \
                 address checked here"
            )
        );
        assert_eq!(
            proxies.describe("https://ci.internal.corp/x").as_deref(),
            Some("directly: NO_PROXY exempts ci.internal.corp")
        );
        assert_eq!(
            proxies.describe("http://hooks.example.com/x").as_deref(),
            Some("directly: no proxy is set for http targets")
        );
        assert_eq!(Proxies::none().describe("https://x/"), None);
    }
}
