//! What a request is signed with, and the two settings that decide it
//! (declared once here): `GORGE_WEBHOOK_STANDARD_SIGNATURES` and
//! `GORGE_WEBHOOK_KEY_GRACE_SEC`.
//!
//! - Phorge's signature: lower-case hex HMAC-SHA256 of the body under the
//!   hook's key used as ASCII bytes ([`crate::payload::sign`]), always.
//! - Standard Webhooks (opt-in, per hook or for all): `webhook-id` (the
//!   request PHID, the same on every retry), `webhook-timestamp` (the
//!   attempt's Unix time) and `webhook-signature`, a space-separated list
//!   of `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`. The secret is the
//!   hook's key *base64-decoded*: Phorge's keys are 32 characters of
//!   `a-z2-7`, valid base64 for 24 bytes, so a receiver configures
//!   `whsec_<the hook's key>` in any Standard Webhooks library.
//! - Key rotation: when a hook's key differs from the one this signer last
//!   signed with, the previous key keeps signing too until the grace ends
//!   (a second `v1,` entry, and [`Signatures::phorge_previous`] for
//!   Phorge's header). The history is this process's memory: an instance
//!   started after the change never saw the old key
//!   (docs/operations/receivers.md).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Mutex;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ring::hmac;

use crate::model::{Hook, UnixTime};
use crate::payload;
use crate::setting::{Bounds, Lookup, Setting, SettingError, SettingInfo, Shown, Unit};

/// `GORGE_WEBHOOK_STANDARD_SIGNATURES`
pub const STANDARD_SIGNATURES: Setting<StandardScope> = Setting::new(
    "GORGE_WEBHOOK_STANDARD_SIGNATURES",
    "off",
    "Standard Webhooks headers: off, all, or hook PHIDs (comma-separated)",
    standard_scope,
);
/// `GORGE_WEBHOOK_KEY_GRACE_SEC`
pub const KEY_GRACE: Setting<u64> = Setting::number(
    "GORGE_WEBHOOK_KEY_GRACE_SEC",
    "86400",
    "seconds a hook's previous HMAC key still signs after it changed (0 = off)",
    Bounds::at_least(0, Unit::Secs),
);

/// The signing variables, in `--help` order.
pub const VARIABLES: &[SettingInfo] = &[STANDARD_SIGNATURES.info(), KEY_GRACE.info()];

/// Which hooks' requests carry Standard Webhooks headers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StandardScope {
    /// None: requests look exactly like Phorge's.
    #[default]
    Off,
    /// Every hook's.
    All,
    /// These hooks' (`PHID-HWBH-…`).
    Hooks(BTreeSet<String>),
}

impl StandardScope {
    /// Whether `hook_phid`'s requests carry the headers.
    pub fn covers(&self, hook_phid: &str) -> bool {
        match self {
            Self::Off => false,
            Self::All => true,
            Self::Hooks(hooks) => hooks.contains(hook_phid),
        }
    }
}

/// `off`, `all`, or the hooks' PHIDs, comma-separated.
impl Shown for StandardScope {
    fn shown(&self) -> String {
        match self {
            Self::Off => "off".to_owned(),
            Self::All => "all".to_owned(),
            Self::Hooks(hooks) => hooks.iter().cloned().collect::<Vec<_>>().join(", "),
        }
    }
}

fn standard_scope(raw: &str) -> Result<StandardScope, String> {
    let entries: Vec<&str> = raw
        .split([',', ' ', '\t'])
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .collect();
    match entries.as_slice() {
        [] | ["off"] => Ok(StandardScope::Off),
        ["all"] => Ok(StandardScope::All),
        _ => {
            let mut hooks = BTreeSet::new();
            for (at, entry) in entries.into_iter().enumerate() {
                if !is_hook_phid(entry) {
                    return Err(format!(
                        "expected `off`, `all` or hook PHIDs (PHID-HWBH-...); entry {} is none of them",
                        at + 1
                    ));
                }
                hooks.insert(entry.to_owned());
            }
            Ok(StandardScope::Hooks(hooks))
        }
    }
}

fn is_hook_phid(entry: &str) -> bool {
    entry
        .strip_prefix("PHID-HWBH-")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The signing settings, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningSettings {
    /// Which hooks get Standard Webhooks headers.
    pub standard: StandardScope,
    /// Seconds a changed key's predecessor keeps signing; 0 = not at all.
    pub key_grace_secs: u64,
}

impl Default for SigningSettings {
    /// Every variable unset: Phorge's header only, a day's grace.
    fn default() -> Self {
        Self {
            standard: StandardScope::Off,
            key_grace_secs: KEY_GRACE.default_value(),
        }
    }
}

impl SigningSettings {
    /// Reads both variables through `get`.
    pub fn from_lookup(get: Lookup<'_>) -> Result<Self, SettingError> {
        Ok(Self {
            standard: STANDARD_SIGNATURES.read(get)?,
            key_grace_secs: KEY_GRACE.read(get)?,
        })
    }
}

/// Everything one attempt is signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signatures {
    /// Phorge's header value under the hook's current key.
    pub phorge: String,
    /// The same under the previous key, while its grace lasts.
    pub phorge_previous: Option<String>,
    /// The Standard Webhooks headers, where enabled and the key decodes.
    pub standard: Option<StandardSignature>,
}

/// The three Standard Webhooks headers' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandardSignature {
    /// `webhook-id`: the request PHID.
    pub id: String,
    /// `webhook-timestamp`: the attempt's Unix time.
    pub timestamp: UnixTime,
    /// `webhook-signature`: `v1,<base64>` entries, space-separated, the
    /// current key's first.
    pub signature: String,
}

/// The Standard Webhooks secret for a Phorge key: the key base64-decoded,
/// as a library given `whsec_<key>` decodes it; `None` when the key is not
/// base64 (not one Phorge generated).
pub fn standard_secret(hmac_key: &str) -> Option<Vec<u8>> {
    BASE64
        .decode(hmac_key)
        .ok()
        .filter(|secret| !secret.is_empty())
}

/// One `v1,<base64>` entry: HMAC-SHA256 of `id.timestamp.body` under
/// `secret`.
pub fn standard_entry(secret: &[u8], id: &str, timestamp: UnixTime, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut context = hmac::Context::with_key(&key);
    context.update(id.as_bytes());
    context.update(b".");
    context.update(timestamp.to_string().as_bytes());
    context.update(b".");
    context.update(body);
    format!("v1,{}", BASE64.encode(context.sign().as_ref()))
}

/// What signing one attempt found out, for the caller to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The values to send.
    pub signatures: Signatures,
    /// The hook's key changed since this signer last signed for it; the
    /// previous key signs too until this time (absent without a grace).
    pub key_changed: Option<KeyChange>,
    /// Standard Webhooks headers were asked for but the key is not base64.
    pub standard_unavailable: bool,
}

/// A key change this signer noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyChange {
    /// When the previous key stops signing; `None` when there is no grace.
    pub grace_until: Option<UnixTime>,
}

/// Signs attempts and remembers each hook's last key (one entry per hook
/// signed for, with at most one previous key).
#[derive(Default)]
pub struct Signer {
    settings: SigningSettings,
    keys: Mutex<HashMap<String, KeyHistory>>,
}

// Hand-written, as for `Hook`: a key never reaches a log through `{:?}`.
impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hooks = self.keys.lock().map_or(0, |keys| keys.len());
        f.debug_struct("Signer")
            .field("settings", &self.settings)
            .field("hooks_known", &hooks)
            .finish_non_exhaustive()
    }
}

struct KeyHistory {
    current: String,
    previous: Option<(String, UnixTime)>,
}

impl Signer {
    /// A signer with these settings and no history.
    pub fn new(settings: SigningSettings) -> Self {
        Self {
            settings,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &SigningSettings {
        &self.settings
    }

    /// Signs `body` for one attempt to `hook` at `now`.
    pub fn sign(&self, hook: &Hook, request_phid: &str, now: UnixTime, body: &[u8]) -> Signed {
        let (previous, key_changed) = self.previous_key(hook, now);
        let mut standard_unavailable = false;
        let standard = if self.settings.standard.covers(&hook.phid) {
            let signature =
                standard_header(&hook.hmac_key, previous.as_deref(), request_phid, now, body);
            standard_unavailable = signature.is_none();
            signature.map(|signature| StandardSignature {
                id: request_phid.to_owned(),
                timestamp: now,
                signature,
            })
        } else {
            None
        };
        Signed {
            signatures: Signatures {
                phorge: payload::sign(hook.hmac_key.as_bytes(), body),
                phorge_previous: previous.map(|key| payload::sign(key.as_bytes(), body)),
                standard,
            },
            key_changed,
            standard_unavailable,
        }
    }

    /// Hooks whose previous key still signs at `now`, with when it stops,
    /// in PHID order.
    pub fn in_grace(&self, now: UnixTime) -> Vec<(String, UnixTime)> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<(String, UnixTime)> = keys
            .iter()
            .filter_map(|(phid, history)| match &history.previous {
                Some((_, until)) if *until > now => Some((phid.clone(), *until)),
                _ => None,
            })
            .collect();
        found.sort();
        found
    }

    /// Records `hook`'s key and returns the previous one while its grace
    /// lasts, and whether the key changed just now.
    fn previous_key(&self, hook: &Hook, now: UnixTime) -> (Option<String>, Option<KeyChange>) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let Some(history) = keys.get_mut(&hook.phid) else {
            keys.insert(
                hook.phid.clone(),
                KeyHistory {
                    current: hook.hmac_key.clone(),
                    previous: None,
                },
            );
            return (None, None);
        };
        let mut changed = None;
        if history.current != hook.hmac_key {
            let old = std::mem::replace(&mut history.current, hook.hmac_key.clone());
            let grace = self.settings.key_grace_secs;
            history.previous = (grace > 0).then(|| (old, now.saturating_add(grace)));
            changed = Some(KeyChange {
                grace_until: history.previous.as_ref().map(|(_, until)| *until),
            });
        }
        if history
            .previous
            .as_ref()
            .is_some_and(|(_, until)| *until <= now)
        {
            history.previous = None;
        }
        (
            history.previous.as_ref().map(|(key, _)| key.clone()),
            changed,
        )
    }
}

/// `webhook-signature`'s value: the current key's entry, then the previous
/// key's (when it decodes); `None` when the current key does not decode.
fn standard_header(
    key: &str,
    previous: Option<&str>,
    id: &str,
    timestamp: UnixTime,
    body: &[u8],
) -> Option<String> {
    let mut header = standard_entry(&standard_secret(key)?, id, timestamp, body);
    if let Some(secret) = previous.and_then(standard_secret) {
        header.push(' ');
        header.push_str(&standard_entry(&secret, id, timestamp, body));
    }
    Some(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vectors::KEY;

    const NEW_KEY: &str = "zyxwvutsrqponmlkjihgfedcba765432";
    const HOOK: &str = "PHID-HWBH-aaaaaaaaaaaaaaaaaaaa";

    fn hook(key: &str) -> Hook {
        Hook {
            phid: HOOK.into(),
            name: "h".into(),
            uri: "https://example.com/".into(),
            status: "enabled".into(),
            hmac_key: key.into(),
        }
    }

    fn signer(standard: StandardScope, key_grace_secs: u64) -> Signer {
        Signer::new(SigningSettings {
            standard,
            key_grace_secs,
        })
    }

    #[test]
    fn the_scope_reads_off_all_or_hook_phids() {
        let read = |raw: &str| STANDARD_SIGNATURES.parse_text(raw);
        assert_eq!(read("").expect("ok"), StandardScope::Off);
        assert_eq!(read("off").expect("ok"), StandardScope::Off);
        assert_eq!(read(" all ").expect("ok"), StandardScope::All);
        let StandardScope::Hooks(hooks) = read(&format!("{HOOK}, PHID-HWBH-b")).expect("ok") else {
            panic!("expected hooks");
        };
        assert_eq!(hooks.len(), 2);
        for bad in [
            "yes",
            "all,off",
            "PHID-HWBR-x",
            "PHID-HWBH-",
            "PHID-HWBH-a;b",
        ] {
            let err = read(bad).expect_err("refused");
            assert_eq!(err.variable, "GORGE_WEBHOOK_STANDARD_SIGNATURES");
            assert!(
                err.reason
                    .ends_with(&format!("entry 1 is none of them (set to {bad:?})")),
                "{err}"
            );
        }
        assert_eq!(SigningSettings::default().key_grace_secs, 86_400);
    }

    /// The Standard Webhooks specification's own example: secret
    /// `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`, id `msg_p5jXN8AQM9LWM0D4loKWxJek`,
    /// timestamp 1614265330, body `{"test": 2432232314}`.
    #[test]
    fn an_entry_matches_the_specifications_example() {
        let secret = standard_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("ok");
        assert_eq!(
            standard_entry(
                &secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_signers_debug_never_shows_a_key() {
        let signer = signer(StandardScope::All, 60);
        signer.sign(&hook(KEY), "PHID-HWBR-1", 1_000, b"x");
        signer.sign(&hook(NEW_KEY), "PHID-HWBR-1", 1_001, b"x");
        let shown = format!("{signer:?}");
        assert!(!shown.contains(KEY) && !shown.contains(NEW_KEY), "{shown}");
        assert!(shown.contains("hooks_known: 1"), "{shown}");
    }

    #[test]
    fn a_bad_entry_is_named_by_its_place_in_the_list() {
        let err = STANDARD_SIGNATURES
            .parse_text(&format!("{HOOK},{HOOK},nope"))
            .expect_err("refused");
        assert!(
            err.reason.contains("entry 3 is none of them (set to"),
            "{err}"
        );
    }

    #[test]
    fn phorge_keys_decode_to_24_bytes_and_other_text_does_not_decode() {
        assert_eq!(standard_secret(KEY).map(|s| s.len()), Some(24));
        assert_eq!(standard_secret("not base64!"), None);
        assert_eq!(standard_secret(""), None);
    }

    #[test]
    fn standard_headers_only_for_hooks_in_scope() {
        let body = b"{}\n";
        let off = signer(StandardScope::Off, 0).sign(&hook(KEY), "PHID-HWBR-1", 100, body);
        assert_eq!(off.signatures.standard, None);
        assert_eq!(off.signatures.phorge, payload::sign(KEY.as_bytes(), body));
        let other = signer(StandardScope::Hooks(["PHID-HWBH-b".to_owned()].into()), 0);
        assert_eq!(
            other
                .sign(&hook(KEY), "PHID-HWBR-1", 100, body)
                .signatures
                .standard,
            None
        );
        let all = signer(StandardScope::All, 0).sign(&hook(KEY), "PHID-HWBR-1", 100, body);
        let standard = all.signatures.standard.expect("ok");
        assert_eq!(standard.id, "PHID-HWBR-1");
        assert_eq!(standard.timestamp, 100);
        assert_eq!(
            standard.signature,
            standard_entry(&standard_secret(KEY).expect("ok"), "PHID-HWBR-1", 100, body)
        );
        let odd = signer(StandardScope::All, 0).sign(&hook("odd key!"), "PHID-HWBR-1", 100, body);
        assert!(odd.standard_unavailable);
        assert_eq!(odd.signatures.standard, None);
    }

    #[test]
    fn a_changed_key_keeps_the_previous_one_signing_until_the_grace_ends() {
        let body = b"{}\n";
        let signer = signer(StandardScope::All, 60);
        let first = signer.sign(&hook(KEY), "PHID-HWBR-1", 1_000, body);
        assert_eq!(
            (first.key_changed, first.signatures.phorge_previous),
            (None, None)
        );

        let changed = signer.sign(&hook(NEW_KEY), "PHID-HWBR-1", 1_010, body);
        assert_eq!(
            changed.key_changed,
            Some(KeyChange {
                grace_until: Some(1_070)
            })
        );
        assert_eq!(
            changed.signatures.phorge,
            payload::sign(NEW_KEY.as_bytes(), body)
        );
        assert_eq!(
            changed.signatures.phorge_previous.as_deref(),
            Some(payload::sign(KEY.as_bytes(), body).as_str())
        );
        let entries: Vec<String> = changed
            .signatures
            .standard
            .expect("ok")
            .signature
            .split(' ')
            .map(str::to_owned)
            .collect();
        let entry = |key: &str| {
            standard_entry(
                &standard_secret(key).expect("ok"),
                "PHID-HWBR-1",
                1_010,
                body,
            )
        };
        assert_eq!(entries, vec![entry(NEW_KEY), entry(KEY)]);
        assert_eq!(signer.in_grace(1_069), vec![(HOOK.to_owned(), 1_070)]);

        let later = signer.sign(&hook(NEW_KEY), "PHID-HWBR-2", 1_070, body);
        assert_eq!(
            (later.key_changed, later.signatures.phorge_previous),
            (None, None)
        );
        assert_eq!(
            later
                .signatures
                .standard
                .expect("ok")
                .signature
                .split(' ')
                .count(),
            1
        );
        assert!(signer.in_grace(1_070).is_empty());
    }

    #[test]
    fn without_a_grace_a_change_is_reported_and_only_the_new_key_signs() {
        let signer = signer(StandardScope::Off, 0);
        signer.sign(&hook(KEY), "PHID-HWBR-1", 1_000, b"x");
        let changed = signer.sign(&hook(NEW_KEY), "PHID-HWBR-1", 1_001, b"x");
        assert_eq!(changed.key_changed, Some(KeyChange { grace_until: None }));
        assert_eq!(changed.signatures.phorge_previous, None);
        assert!(signer.in_grace(1_001).is_empty());
    }
}
