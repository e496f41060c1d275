//! Hook and redirect URIs: what counts as callable (an absolute `http` or
//! `https` URI with a host, protocol §5 step 5) and how a `Location` header is
//! resolved against the URI that answered (RFC 3986 §5.2, as cURL does).
//!
//! Pure string work; it never resolves names. A URI's user-info is split
//! off here (see [`crate::auth`]) and never printed.

use std::net::IpAddr;

use http::uri::{Scheme, Uri};

use crate::auth::UserInfo;

/// `uri` split into itself without `user:password@` and that user-info.
/// The user-info is kept apart so that it never reaches connection-pool
/// keys or their debug logs; it goes out only as Basic authentication.
fn split_user_info(uri: Uri) -> Result<(Uri, Option<UserInfo>), String> {
    let Some(authority) = uri.authority() else {
        return Ok((uri, None));
    };
    // cURL splits at the first `@` and would then fail on a host holding
    // another one; the http crate takes the last one as the separator.
    let Some((user_info, host_port)) = authority.as_str().split_once('@') else {
        return Ok((uri, None));
    };
    if host_port.contains('@') {
        return Err("more than one '@' before the host".to_owned());
    }
    let user_info = UserInfo::parse(user_info)?;
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(
        host_port
            .parse()
            .map_err(|err| format!("cannot parse the URI's host ({err})"))?,
    );
    let uri = Uri::from_parts(parts).map_err(|err| format!("cannot rebuild the URI ({err})"))?;
    Ok((uri, Some(user_info)))
}

/// A URI the transport may try to call: absolute, `http`/`https`, with a
/// host. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HookUri {
    uri: Uri,
    user_info: Option<UserInfo>,
}

/// The longest URI the `http` crate can hold (`u16::MAX - 1` bytes; it
/// keeps offsets in `u16`s). cURL has no such limit, and Phorge's
/// `webhookURI` is LONGTEXT: longer hook URIs are refused as `uri`, a
/// stated limit (docs/compatibility.md).
pub(crate) const MAX_URI_LEN: usize = u16::MAX as usize - 1;

/// Checks the port of `host_port` (an authority without user-info) as
/// cURL's URL parser does: nothing after the colon means the scheme's
/// default; otherwise only decimal digits (leading zeros allowed) up to
/// 65535. Port 0 passes, as with cURL, whose connect then fails (7). The
/// `http` crate takes any other text and quietly drops it, which would
/// send `:99999` or `:-1` to port 80.
fn check_port(host_port: &str) -> Result<(), String> {
    let after_host = match host_port.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((_, rest)) => rest,
            None => return Err("an IPv6 address without its closing ']'".to_owned()),
        },
        None => host_port.find(':').map_or("", |at| &host_port[at..]),
    };
    let port = match after_host.strip_prefix(':') {
        Some(port) => port,
        None if after_host.is_empty() => return Ok(()),
        None => return Err("text after the IPv6 address that is not a port".to_owned()),
    };
    if port.is_empty() {
        return Ok(());
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the port is not a decimal number".to_owned());
    }
    let digits = port.trim_start_matches('0');
    if digits.len() > 5 || digits.parse::<u32>().is_ok_and(|n| n > 65_535) {
        return Err(format!("port {digits} is above 65535"));
    }
    Ok(())
}

impl HookUri {
    /// Parses and checks a hook URI; the error says why it is malformed.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_URI_LEN {
            return Err(format!(
                "URI longer than 65,534 bytes, the HTTP library's limit ({} bytes)",
                text.len()
            ));
        }
        let uri: Uri = text
            .parse()
            // The text stays out of the message: it may carry credentials.
            .map_err(|err| format!("cannot parse the URI ({err})"))?;
        Self::check(uri)
    }

    fn check(uri: Uri) -> Result<Self, String> {
        match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS => {}
            Some(scheme) => return Err(format!("scheme {scheme:?} is not http or https")),
            None => return Err("no scheme (not an absolute URI)".to_owned()),
        }
        match uri.host() {
            Some(host) if !host.is_empty() && host != "[]" => {}
            _ => return Err("no host".to_owned()),
        }
        let (uri, user_info) = split_user_info(uri)?;
        check_port(uri.authority().map(|a| a.as_str()).unwrap_or_default())?;
        Ok(Self { uri, user_info })
    }

    /// `scheme://host:port` of this URI, for logs: never its path, query or
    /// user-info, which may carry credentials.
    pub(crate) fn origin(&self) -> String {
        format!(
            "{}://{}:{}",
            self.scheme(),
            self.uri.host().unwrap_or_default(),
            self.port()
        )
    }

    /// The parsed URI, without user-info.
    pub(crate) fn uri(&self) -> &Uri {
        &self.uri
    }

    /// The user-info the URI carried, decoded.
    pub(crate) fn user_info(&self) -> Option<&UserInfo> {
        self.user_info.as_ref()
    }

    /// `http` or `https`.
    pub(crate) fn scheme(&self) -> &str {
        self.uri.scheme_str().unwrap_or("http")
    }

    /// Same scheme, host (ASCII case aside) and port, as cURL compares them
    /// before sending credentials on a redirect.
    pub(crate) fn same_origin(&self, other: &Self) -> bool {
        self.scheme() == other.scheme()
            && self.host().eq_ignore_ascii_case(other.host())
            && self.port() == other.port()
    }

    /// The host without IPv6 brackets.
    pub(crate) fn host(&self) -> &str {
        let host = self.uri.host().unwrap_or_default();
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    /// The host as an address when it is an IP literal.
    pub(crate) fn ip_literal(&self) -> Option<IpAddr> {
        self.host().parse().ok()
    }

    /// The explicit port, or the scheme's default.
    pub(crate) fn port(&self) -> u16 {
        self.uri.port_u16().unwrap_or_else(|| {
            if self.uri.scheme() == Some(&Scheme::HTTPS) {
                443
            } else {
                80
            }
        })
    }

    /// Resolves a `Location` value against this URI (RFC 3986 §5.2.2) and
    /// checks the result like a hook URI. The fragment is dropped: it never
    /// goes on the wire.
    pub(crate) fn join(&self, location: &str) -> Result<Self, String> {
        let reference = location.split('#').next().unwrap_or_default().trim();
        let base_scheme = self.uri.scheme_str().unwrap_or("http");
        let base_authority = self.uri.authority().map(|a| a.as_str()).unwrap_or_default();
        let target = if has_scheme(reference) {
            reference.to_owned()
        } else if let Some(rest) = reference.strip_prefix("//") {
            format!("{base_scheme}://{rest}")
        } else {
            let (ref_path, ref_query) = split_query(reference);
            let base_path = self.uri.path();
            let (path, query) = if ref_path.is_empty() {
                let query = ref_query.or(self.uri.query());
                (base_path.to_owned(), query)
            } else if ref_path.starts_with('/') {
                (remove_dot_segments(ref_path), ref_query)
            } else {
                (remove_dot_segments(&merge(base_path, ref_path)), ref_query)
            };
            match query {
                Some(query) => format!("{base_scheme}://{base_authority}{path}?{query}"),
                None => format!("{base_scheme}://{base_authority}{path}"),
            }
        };
        Self::parse(&target)
    }
}

/// RFC 3986 `scheme ":"` at the start of a reference.
fn has_scheme(reference: &str) -> bool {
    let Some((scheme, _)) = reference.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn split_query(reference: &str) -> (&str, Option<&str>) {
    match reference.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (reference, None),
    }
}

/// RFC 3986 §5.2.3 for a base with an authority.
fn merge(base_path: &str, reference_path: &str) -> String {
    if base_path.is_empty() {
        return format!("/{reference_path}");
    }
    match base_path.rfind('/') {
        Some(slash) => format!("{}{reference_path}", &base_path[..=slash]),
        None => format!("/{reference_path}"),
    }
}

/// RFC 3986 §5.2.4.
fn remove_dot_segments(path: &str) -> String {
    let mut input = path;
    let mut output: Vec<&str> = Vec::new();
    while !input.is_empty() {
        if let Some(rest) = input.strip_prefix("../") {
            input = rest;
        } else if let Some(rest) = input.strip_prefix("./") {
            input = rest;
        } else if input.starts_with("/./") {
            input = &input[2..];
        } else if input == "/." {
            input = "/";
        } else if input.starts_with("/../") {
            input = &input[3..];
            output.pop();
        } else if input == "/.." {
            input = "/";
            output.pop();
        } else if input == "." || input == ".." {
            input = "";
        } else {
            // Move the first segment (with its leading "/", if any).
            let start = usize::from(input.starts_with('/'));
            let end = input[start..].find('/').map_or(input.len(), |i| i + start);
            output.push(&input[..end]);
            input = &input[end..];
        }
    }
    let joined = output.concat();
    if joined.is_empty() {
        "/".to_owned()
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn user_info_is_split_off_and_never_quoted() {
        let uri =
            HookUri::parse("https://user:s3cret@hooks.example:8443/p?token=t").expect("valid");
        assert_eq!(
            uri.uri().to_string(),
            "https://hooks.example:8443/p?token=t"
        );
        assert!(uri.user_info().is_some());
        assert_eq!(uri.origin(), "https://hooks.example:8443");
        assert!(!format!("{uri:?}").contains("s3cret"));
        let err = HookUri::parse("http://a@s3cret@h/").expect_err("two @");
        assert!(!err.contains("s3cret"), "{err}");
        let err = HookUri::parse("http://bad host/x?token=s3cret").expect_err("malformed");
        assert!(
            !err.contains("s3cret") && !err.contains("bad host"),
            "{err}"
        );
    }

    use super::*;

    #[test]
    fn accepts_absolute_http_and_https_with_host() {
        for ok in [
            "http://example.com",
            "https://example.com/hook?x=1",
            "http://127.0.0.1:8080/",
            "http://[::1]:9/x",
        ] {
            assert!(HookUri::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_what_is_not_an_http_uri_with_a_host() {
        for bad in [
            "",
            "http://",
            "http:///path",
            "ftp://example.com/",
            "file:///etc/passwd",
            "gopher://example.com",
            "/relative/path",
            "relative",
            "example.com/hook",
            "http://exa mple.com/",
        ] {
            assert!(HookUri::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn ports_are_checked_as_curl_checks_them() {
        // Measured with curl 7.88.1: these are "URL using bad/illegal
        // format" (3) there; the http crate reads each as "no port" (80).
        for (bad, why) in [
            ("http://h:99999/", "port 99999 is above 65535"),
            ("http://h:65536/", "port 65536 is above 65535"),
            ("http://h:65616/", "port 65616 is above 65535"),
            ("http://h:00065536/", "port 65536 is above 65535"),
            (
                "http://h:123456789012345678901/",
                "port 123456789012345678901 is above 65535",
            ),
            ("http://h:-1/", "the port is not a decimal number"),
            ("http://h:+80/", "the port is not a decimal number"),
            ("http://h:8a/", "the port is not a decimal number"),
            ("https://u:p@h:99999/", "port 99999 is above 65535"),
            ("http://[::1]:99999/", "port 99999 is above 65535"),
            ("http://[::1]:x/", "the port is not a decimal number"),
        ] {
            assert_eq!(HookUri::parse(bad).expect_err(bad), why, "{bad}");
        }
        // And these curl takes: an empty port is the default, leading
        // zeros are dropped, 0 is a port (whose connect fails, 7).
        for (ok, port) in [
            ("http://h:/", 80),
            ("https://h:/x", 443),
            ("http://[::1]:/", 80),
            ("http://h:08/", 8),
            ("http://h:000000000000000001/", 1),
            ("http://h:65535/", 65535),
            ("http://h:0/", 0),
            ("https://u:p@h:8443/", 8443),
        ] {
            assert_eq!(HookUri::parse(ok).expect(ok).port(), port, "{ok}");
        }
        // A redirect is checked the same way.
        let base = HookUri::parse("http://h/").expect("base");
        assert!(base.join("http://h:70000/").is_err());
    }

    #[test]
    fn uris_longer_than_the_http_crates_limit_are_refused_saying_so() {
        let head = "http://h/";
        let longest = format!("{head}{}", "a".repeat(MAX_URI_LEN - head.len()));
        assert!(HookUri::parse(&longest).is_ok());
        let longer = format!("{longest}a");
        assert_eq!(
            HookUri::parse(&longer).expect_err("too long"),
            "URI longer than 65,534 bytes, the HTTP library's limit (65535 bytes)"
        );
    }

    #[test]
    fn host_port_and_ip_literal() {
        let v6 = HookUri::parse("https://[::ffff:127.0.0.1]/").expect("v6");
        assert_eq!(v6.host(), "::ffff:127.0.0.1");
        assert_eq!(v6.port(), 443);
        assert_eq!(
            v6.ip_literal(),
            Some("::ffff:127.0.0.1".parse().expect("ip"))
        );
        let name = HookUri::parse("http://example.com:8080/x").expect("name");
        assert_eq!(name.host(), "example.com");
        assert_eq!(name.port(), 8080);
        assert_eq!(name.ip_literal(), None);
        assert_eq!(HookUri::parse("http://h/").expect("h").port(), 80);
    }

    #[test]
    fn joins_references_as_rfc3986_section_5_4_examples() {
        // RFC 3986 §5.4.1 and §5.4.2, base "http://a/b/c/d;p?q" (the
        // fragment-only and scheme-relative-to-other-scheme cases aside).
        let base = HookUri::parse("http://a/b/c/d;p?q").expect("base");
        let cases = [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q"),
            ("g#s", "http://a/b/c/g"),
            (";x", "http://a/b/c/;x"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
            ("../../../g", "http://a/g"),
            ("/./g", "http://a/g"),
            ("/../g", "http://a/g"),
            ("g.", "http://a/b/c/g."),
            ("..g", "http://a/b/c/..g"),
            ("./../g", "http://a/b/g"),
            ("g/./h", "http://a/b/c/g/h"),
            ("g/../h", "http://a/b/c/h"),
            ("https://other:8443/x?y", "https://other:8443/x?y"),
        ];
        for (reference, expected) in cases {
            let joined = base.join(reference).expect(reference);
            assert_eq!(joined.uri().to_string(), expected, "{reference:?}");
        }
    }

    #[test]
    fn joined_location_must_still_be_http() {
        let base = HookUri::parse("https://a/b").expect("base");
        assert!(base.join("ftp://a/b").is_err());
        assert!(base.join("mailto:x@y").is_err());
        assert_eq!(
            base.join("//c/d")
                .expect("scheme-relative")
                .uri()
                .to_string(),
            "https://c/d"
        );
    }
}
