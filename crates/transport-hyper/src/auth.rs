//! HTTP Basic authentication from a hook URI's user-info, as PHP's cURL
//! sends it (measured against cURL 7.88): `Authorization: Basic
//! base64(user ":" password)`, user and password percent-decoded (an
//! invalid escape, `+` and `;` kept as written), a missing password sent as
//! empty (`https://user@host/` → `user:`).
//!
//! Across redirects [`BasicAuth`] keeps cURL's rules: the credentials are
//! sent only on hops to the first request's origin (same scheme, host
//! without regard to case, and port); a hop that changes scheme or port
//! forgets them for the rest of the delivery; a `Location` carrying
//! user-info replaces the user, and the password when it names one.
//!
//! It only computes header values: it never logs, the header value is
//! marked sensitive (HPACK never indexes it), and no `Debug` form here
//! prints a user name or password.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::HeaderValue;

use crate::uri::HookUri;

/// The user name and password a URI's user-info carries, decoded.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct UserInfo {
    user: Vec<u8>,
    password: Option<Vec<u8>>,
}

impl UserInfo {
    /// Splits `raw` (the text before the authority's `@`) at its first
    /// `:` and percent-decodes both parts. The error never quotes `raw`.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        let (user, password) = match raw.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (raw, None),
        };
        Ok(Self {
            user: percent_decode(user)?,
            password: password.map(percent_decode).transpose()?,
        })
    }
}

impl fmt::Debug for UserInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UserInfo(redacted)")
    }
}

/// `%XX` → the byte; anything else, a `%` without two hex digits included,
/// stays as it is, as cURL decodes. cURL refuses a URL whose user-info
/// decodes to a NUL byte (error 3, malformed URL), so this does too.
fn percent_decode(text: &str) -> Result<Vec<u8>, String> {
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(text).collect();
    if decoded.contains(&0) {
        return Err("the user-info holds an encoded NUL byte".to_owned());
    }
    Ok(decoded)
}

/// The Basic credentials of one delivery, hop by hop.
#[derive(Clone)]
pub(crate) struct BasicAuth {
    first: HookUri,
    user: Option<Vec<u8>>,
    password: Option<Vec<u8>>,
}

impl fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BasicAuth")
            .field("first", &self.first.origin())
            .field("has_user", &self.user.is_some())
            .finish_non_exhaustive()
    }
}

impl BasicAuth {
    /// The credentials of the delivery's first request, `first`.
    pub(crate) fn new(first: &HookUri) -> Self {
        let mut auth = Self {
            first: first.clone(),
            user: None,
            password: None,
        };
        auth.take_user_info(first);
        auth
    }

    /// Moves on to the hop `to`, redirected from `from`.
    pub(crate) fn follow(&mut self, from: &HookUri, to: &HookUri) {
        if from.scheme() != to.scheme() || from.port() != to.port() {
            self.user = None;
            self.password = None;
        }
        self.take_user_info(to);
    }

    fn take_user_info(&mut self, uri: &HookUri) {
        if let Some(info) = uri.user_info() {
            self.user = Some(info.user.clone());
            if let Some(password) = &info.password {
                self.password = Some(password.clone());
            }
        }
    }

    /// The `Authorization` value for the hop `hop`, if one is sent there.
    pub(crate) fn header(&self, hop: &HookUri) -> Option<HeaderValue> {
        let user = self.user.as_ref()?;
        if !hop.same_origin(&self.first) {
            return None;
        }
        basic(user, self.password.as_deref())
    }
}

impl UserInfo {
    /// `Basic base64(user ":" password)`, marked sensitive: the value of
    /// `Proxy-Authorization` for a proxy URL's user-info.
    pub(crate) fn basic(&self) -> Option<HeaderValue> {
        basic(&self.user, self.password.as_deref())
    }
}

fn basic(user: &[u8], password: Option<&[u8]>) -> Option<HeaderValue> {
    let mut pair = user.to_vec();
    pair.push(b':');
    pair.extend_from_slice(password.unwrap_or_default());
    // Base64 is always a valid header value, so this never fails.
    let mut value = HeaderValue::try_from(format!("Basic {}", STANDARD.encode(pair))).ok()?;
    value.set_sensitive(true);
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> HookUri {
        HookUri::parse(text).expect("valid")
    }

    fn sent(auth: &BasicAuth, hop: &HookUri) -> Option<String> {
        auth.header(hop).map(|value| {
            let text = value.to_str().expect("ascii");
            let encoded = text.strip_prefix("Basic ").expect("Basic");
            String::from_utf8_lossy(&STANDARD.decode(encoded).expect("base64")).into_owned()
        })
    }

    /// Each case was sent through cURL 7.88.1 to a loopback listener.
    #[test]
    fn user_info_decodes_as_curl_sends_it() {
        for (uri_text, expected) in [
            ("http://user:secret@h/", Some("user:secret")),
            ("http://user@h/", Some("user:")),
            ("http://user:@h/", Some("user:")),
            ("http://:pw@h/", Some(":pw")),
            ("http://@h/", Some(":")),
            ("http://us%40er:p%3Ass@h/", Some("us@er:p:ss")),
            ("http://u:p:q@h/", Some("u:p:q")),
            ("http://a%zz+b:c%2@h/", Some("a%zz+b:c%2")),
            ("http://u;opt:pw@h/", Some("u;opt:pw")),
            ("http://us%0Aer:pw@h/", Some("us\ner:pw")),
            ("http://h/", None),
        ] {
            let first = uri(uri_text);
            assert_eq!(
                sent(&BasicAuth::new(&first), &first).as_deref(),
                expected,
                "{uri_text}"
            );
        }
        let first = uri("http://u%C3%A9:p%FF@h/");
        let value = BasicAuth::new(&first).header(&first).expect("sent");
        assert_eq!(value.to_str().expect("ascii"), "Basic dcOpOnD/");
        assert!(value.is_sensitive());
    }

    #[test]
    fn an_encoded_nul_is_refused_without_quoting_the_user_info() {
        let err = HookUri::parse("http://name-4k%00:pass-8w@h/").expect_err("NUL");
        assert!(
            !err.contains("name-4k") && !err.contains("pass-8w"),
            "{err}"
        );
    }

    #[test]
    fn nothing_prints_the_credentials() {
        let first = uri("http://user-7q:secret-9z@h/");
        let auth = BasicAuth::new(&first);
        let printed = format!("{first:?} {auth:?} {:?}", auth.header(&first));
        assert!(
            !printed.contains("user-7q") && !printed.contains("secret-9z"),
            "{printed}"
        );
        assert!(!printed.contains("dXNlci03cTpzZWNyZXQtOXo"), "{printed}");
    }

    #[test]
    fn redirects_keep_them_for_the_first_origin_only() {
        let first = uri("http://u:p@a:8080/start");
        let mut auth = BasicAuth::new(&first);
        let same = uri("http://A:8080/next");
        auth.follow(&first, &same);
        assert_eq!(sent(&auth, &same).as_deref(), Some("u:p"));
        let other_host = uri("http://b:8080/x");
        auth.follow(&same, &other_host);
        assert_eq!(sent(&auth, &other_host), None);
        // Another host on the same scheme and port keeps them, as cURL
        // does, for a hop back to the first origin.
        auth.follow(&other_host, &same);
        assert_eq!(sent(&auth, &same).as_deref(), Some("u:p"));
    }

    #[test]
    fn a_change_of_port_or_scheme_forgets_them() {
        for away in ["http://a:9090/x", "https://a:8080/x"] {
            let first = uri("http://u:p@a:8080/start");
            let away = uri(away);
            let back = uri("http://a:8080/back");
            let mut auth = BasicAuth::new(&first);
            auth.follow(&first, &away);
            assert_eq!(sent(&auth, &away), None);
            auth.follow(&away, &back);
            assert_eq!(sent(&auth, &back), None, "{away:?}");
        }
        let first = uri("http://u:p@a/");
        let explicit_port = uri("http://a:80/x");
        let mut auth = BasicAuth::new(&first);
        auth.follow(&first, &explicit_port);
        assert_eq!(sent(&auth, &explicit_port).as_deref(), Some("u:p"));
    }

    #[test]
    fn a_location_with_user_info_replaces_them() {
        for (location, expected) in [
            ("http://x:y@a/end", "x:y"),
            ("http://x@a/end", "x:p"),
            ("http://@a/end", ":p"),
            ("http://:q@a/end", ":q"),
        ] {
            let first = uri("http://u:p@a/start");
            let next = uri(location);
            let mut auth = BasicAuth::new(&first);
            auth.follow(&first, &next);
            assert_eq!(sent(&auth, &next).as_deref(), Some(expected), "{location}");
        }
        let first = uri("http://a/start");
        let next = uri("http://x:y@a/end");
        let mut auth = BasicAuth::new(&first);
        assert_eq!(sent(&auth, &first), None);
        auth.follow(&first, &next);
        assert_eq!(sent(&auth, &next).as_deref(), Some("x:y"));
        let elsewhere = uri("http://x:y@b/end");
        auth.follow(&next, &elsewhere);
        assert_eq!(sent(&auth, &elsewhere), None);
    }
}
