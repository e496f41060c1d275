//! The name of Phorge's per-hook MySQL named lock, computed exactly as its
//! PHP worker does, so a daemon and a leftover PHP worker exclude each other.

use ring::digest;

const INDEX_ALPHABET: &[u8; 64] =
    b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._";

/// `GET_LOCK` name guarding deliveries to one hook:
/// `"ph:" + d(namespace) + ":" + d("webhook(" + hook_phid + ")()")`.
pub fn hook_lock_name(namespace: &str, hook_phid: &str) -> String {
    // PhabricatorGlobalLock names are "<name>(<parameters>)"; the worker's
    // lock has the hook as its name and no parameters, hence the "()".
    let lock_key = format!("webhook({hook_phid})()");
    format!("ph:{}:{}", abbreviate(namespace), abbreviate(&lock_key))
}

/// `d(s)`: the first seven bytes of `s`, `-`, then its index digest.
fn abbreviate(s: &str) -> String {
    let prefix: String = s.bytes().take(7).map(char::from).collect();
    format!("{prefix}-{}", digest_for_index(s))
}

/// Phorge's `digestForIndex`: twelve characters from the first twelve bytes
/// of SHA-1, each reduced to six bits.
fn digest_for_index(s: &str) -> String {
    let sha1 = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, s.as_bytes());
    sha1.as_ref()
        .iter()
        .take(12)
        .map(|byte| char::from(INDEX_ALPHABET[usize::from(byte & 0x3f)]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_vector() {
        assert_eq!(
            hook_lock_name("phorge", "PHID-HWBH-zzzzzzzzzzzzzzzzzzzz"),
            "ph:phorge-.nBW.TjxAch.:webhook-kwbJC8g3FvRx"
        );
    }

    #[test]
    fn names_fit_mysqls_64_character_limit() {
        let name = hook_lock_name("a-very-long-namespace", "PHID-HWBH-zzzzzzzzzzzzzzzzzzzz");
        assert!(name.len() <= 64, "{name}");
        assert!(name.starts_with("ph:a-very-"));
    }
}
