//! The windows' unit tests: settings read and refused, effective lease and
//! retry spacing, cutoffs, the claim-ahead budget and the warnings.

use super::*;

#[test]
fn defaults_are_valid_and_match_the_spec() {
    let windows = Windows::try_new(Settings::default()).expect("defaults valid");
    assert_eq!(windows.lease_secs(), 30);
    assert_eq!(windows.effective_retry_spacing_secs(), 60);
    assert_eq!(windows.breaker().threshold, 10);
    assert_eq!(windows.breaker().window_secs, 300);
    assert!(windows.warnings().is_empty());
    // The defaults, pinned here as numbers (the Go service's, except
    // MAX_CONCURRENT: its 8 was rows per tick, ours is calls in flight):
    // each is written once, as its variable's default text, so a slip
    // there shows here.
    assert_eq!(windows.poll_interval(), Duration::from_millis(1000));
    assert_eq!(windows.delivery_timeout(), Duration::from_secs(15));
    assert_eq!(windows.max_concurrent(), 256);
    assert_eq!(
        windows.batch_size(),
        1024,
        "0 = 8 x MAX_CONCURRENT, at most 1024"
    );
    assert_eq!(windows.settings().claim_lease_secs, 30);
    assert_eq!(windows.settings().retry_backoff_secs, 60);
    assert_eq!(windows.settings().retry_after_max_secs, 3600);
}

#[test]
fn a_retry_after_pause_is_clamped_to_one_second_up_to_the_maximum() {
    let pause = |max: u64, asked: u64| {
        Windows::try_new(Settings {
            retry_after_max_secs: max,
            ..Settings::default()
        })
        .expect("valid")
        .retry_after_pause(Duration::from_secs(asked))
    };
    let secs = |n: u64| Some(Duration::from_secs(n));
    assert_eq!(pause(3600, 5), secs(5));
    assert_eq!(pause(3600, 0), secs(1), "0 still means not at once");
    assert_eq!(pause(3600, u64::MAX), secs(3600));
    assert_eq!(pause(10, 60), secs(10));
    assert_eq!(pause(0, 5), None, "0 ignores Retry-After");
}

#[test]
fn lease_is_raised_to_cover_a_delivery() {
    let windows = Windows::try_new(Settings {
        claim_lease_secs: 5,
        delivery_timeout: Duration::from_secs(15),
        ..Settings::default()
    })
    .expect("valid");
    assert_eq!(windows.lease_secs(), 17);
    assert!(windows.warnings().contains(&WindowWarning::LeaseRaised {
        configured: 5,
        effective: 17
    }));
}

#[test]
fn rows_claimed_ahead_get_half_the_lease_left_after_timeout_and_margin() {
    let budget = |lease: u64, timeout: u64| {
        Windows::try_new(Settings {
            claim_lease_secs: lease,
            delivery_timeout: Duration::from_secs(timeout),
            ..Settings::default()
        })
        .expect("valid")
        .claim_ahead_budget()
    };
    assert_eq!(budget(30, 15), Duration::from_millis(6_500));
    assert_eq!(budget(5, 15), Duration::ZERO, "lease raised to 17 s");
    assert_eq!(budget(18, 15), Duration::from_millis(500));
    assert_eq!(budget(300, 15), Duration::from_millis(141_500));
}

#[test]
fn backoff_below_lease_is_reported_with_the_real_spacing() {
    let windows = Windows::try_new(Settings {
        retry_backoff_secs: 10,
        ..Settings::default()
    })
    .expect("valid");
    assert_eq!(windows.effective_retry_spacing_secs(), 30);
    let warnings = windows.warnings();
    assert_eq!(
        warnings,
        vec![WindowWarning::BackoffBelowLease {
            backoff: 10,
            lease: 30
        }]
    );
    assert!(warnings[0]
        .to_string()
        .contains("GORGE_WEBHOOK_RETRY_BACKOFF_SEC = 10 s has no effect"));
}

#[test]
fn cutoffs_come_from_one_reading() {
    let windows = Windows::try_new(Settings::default()).expect("valid");
    let cutoffs = windows.cutoffs(1_000);
    assert_eq!(cutoffs.now, 1_000);
    assert_eq!(cutoffs.lease_cutoff, 970);
    assert_eq!(cutoffs.retry_cutoff, 940);
    let early = windows.cutoffs(5);
    assert_eq!((early.lease_cutoff, early.retry_cutoff), (0, 0));
}

#[test]
fn breaker_opens_at_the_threshold() {
    let breaker = Windows::try_new(Settings::default())
        .expect("valid")
        .breaker();
    assert!(!breaker.is_open(9));
    assert!(breaker.is_open(10));
    assert_eq!(breaker.since(1_000), 700);
}

#[test]
fn settings_are_read_by_variable_name() {
    let get = |name: &str| match name {
        "GORGE_WEBHOOK_POLL_INTERVAL_MS" => Some("250".to_owned()),
        "GORGE_WEBHOOK_MAX_CONCURRENT" => Some(" 4 ".to_owned()),
        _ => None,
    };
    let settings = Settings::from_lookup(&get).expect("valid");
    assert_eq!(settings.poll_interval, Duration::from_millis(250));
    assert_eq!(settings.max_concurrent, 4);
    assert_eq!(settings.claim_lease_secs, 30);
    let bad = |name: &str| (name == "GORGE_WEBHOOK_RETRY_BACKOFF_SEC").then(|| "-1".to_owned());
    let err = Settings::from_lookup(&bad).expect_err("negative");
    assert_eq!(err.variable, RETRY_BACKOFF.name);
    assert!(Settings::from_lookup(&|_| None).is_ok_and(|s| s == Settings::default()));
}

#[test]
fn bad_values_name_the_variable() {
    let cases = [
        (
            Settings {
                max_concurrent: 0,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_MAX_CONCURRENT",
        ),
        (
            Settings {
                poll_interval: Duration::ZERO,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_POLL_INTERVAL_MS",
        ),
        (
            Settings {
                delivery_timeout: Duration::ZERO,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_DELIVERY_TIMEOUT",
        ),
        (
            Settings {
                breaker_threshold: 0,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_ERROR_THRESHOLD",
        ),
        (
            Settings {
                breaker_window_secs: 0,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_ERROR_BACKOFF_SEC",
        ),
        (
            Settings {
                claim_lease_secs: 0,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
        ),
        (
            Settings {
                retry_after_max_secs: 86_401,
                ..Settings::default()
            },
            "GORGE_WEBHOOK_RETRY_AFTER_MAX_SEC",
        ),
    ];
    for (settings, name) in cases {
        let err = Windows::try_new(settings).expect_err(name);
        assert!(err.to_string().starts_with(name), "{err}");
    }
}

#[test]
fn a_bound_is_refused_where_the_variable_is_read_naming_it_and_the_bound() {
    for (name, value, message) in [
        (
            "GORGE_WEBHOOK_POLL_INTERVAL_MS",
            "9",
            "GORGE_WEBHOOK_POLL_INTERVAL_MS: must be between 10 and 3600000 ms",
        ),
        (
            "GORGE_WEBHOOK_MAX_CONCURRENT",
            "1025",
            "GORGE_WEBHOOK_MAX_CONCURRENT: must be between 1 and 1024",
        ),
        (
            "GORGE_WEBHOOK_CLAIM_LEASE_SEC",
            "0",
            "GORGE_WEBHOOK_CLAIM_LEASE_SEC: must be between 1 and 86400 s",
        ),
        (
            "GORGE_WEBHOOK_BATCH_SIZE",
            "10001",
            "GORGE_WEBHOOK_BATCH_SIZE: must be between 0 and 10000",
        ),
    ] {
        let get = |asked: &str| (asked == name).then(|| value.to_owned());
        let err = Settings::from_lookup(&get).expect_err(name);
        assert_eq!(err.to_string(), format!("{message} (set to {value:?})"));
    }
}

#[test]
fn every_variable_declares_its_bounds() {
    for info in VARIABLES {
        assert!(info.allowed().is_some(), "{}", info.name);
    }
}
