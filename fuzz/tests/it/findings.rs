//! Regression tests for what the fuzz runs found (docs/fuzzing.md,
//! "Findings"), each replaying the finding's inputs against the fix.

use webhook_fuzz::config::{daemon_refuses, transport_refuses};

/// Transport settings that parse but do not validate used to pass the
/// daemon's configuration check; the daemon then stopped in `app::run`
/// with exit code 1 instead of "bad setting" and 2. Found by the `config`
/// target.
#[test]
fn the_daemon_refuses_what_its_transport_refuses() {
    for variables in [
        [("GORGE_WEBHOOK_CONNECT_TIMEOUT_MS", "0")],
        [("GORGE_WEBHOOK_RESOLVE_TIMEOUT_MS", "0")],
        [("GORGE_WEBHOOK_POOL_IDLE_SEC", "0")],
        [("GORGE_WEBHOOK_SIGNATURE_HEADERS", ",")],
        [("GORGE_WEBHOOK_SIGNATURE_HEADERS", "Content-Type")],
        [("GORGE_WEBHOOK_SIGNATURE_HEADERS", "bad header")],
        [("GORGE_WEBHOOK_USER_AGENT", "line\nbreak")],
        [(
            "GORGE_WEBHOOK_REQUEST_ID_HEADER",
            "X-Phabricator-Webhook-Signature",
        )],
    ] {
        let refused = transport_refuses(&variables)
            .unwrap_or_else(|| panic!("the transport accepts {variables:?}"));
        assert!(refused.starts_with(variables[0].0), "{refused}");
        assert_eq!(
            daemon_refuses(&variables),
            Some(refused),
            "the daemon's configuration check accepts {variables:?}"
        );
    }
}

/// A float in an unknown `properties` key used to change on every
/// write-back: serde_json's default parser is not correctly rounded, so
/// `1844684468446516516516516161` read as 1.8446844684465166e27, was
/// written as `1.8446844684465166e+27`, and that read back as
/// 1.8446844684465169e27. Found by the `properties` target in 33 s; fixed
/// by serde_json's `float_roundtrip` feature.
#[test]
fn floats_survive_the_properties_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions/properties");
    let mut inputs = vec![b"{\"e}9\":1844684468446516516516516161}\n".to_vec()];
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        inputs.push(std::fs::read(entry.path()).expect("readable"));
    }
    assert!(inputs.len() > 1, "the finding's inputs are in {dir:?}");
    for input in inputs {
        webhook_fuzz::properties::run(&input);
    }
}

/// `GORGE_LOG_LEVEL` with a directive that starts with whitespace and holds
/// a non-ASCII character panics inside tracing-subscriber 0.3's filter
/// parser (it walks the trimmed directive and slices the untrimmed one).
/// The daemon used to die at startup with that panic; it now trims each
/// directive first. Found by the `config` target in 56 s.
#[test]
fn a_log_filter_with_odd_whitespace_is_not_a_panic() {
    for filter in [" \u{e9}=debug", "info, \u{e9}[x]", "\u{3000}a=debug"] {
        let verdict = std::panic::catch_unwind(|| daemon_refuses(&[("GORGE_LOG_LEVEL", filter)]))
            .unwrap_or_else(|_| panic!("GORGE_LOG_LEVEL={filter:?} panics"));
        if let Some(refused) = verdict {
            assert!(refused.starts_with("GORGE_LOG_LEVEL: "), "{refused}");
        }
    }
}
