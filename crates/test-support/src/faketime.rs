//! libfaketime, for tests of a host whose clock is off: the environment
//! that starts a process with its wall clock (`CLOCK_REALTIME`) shifted by
//! an offset and its monotonic clock untouched. Debian's `libfaketime`
//! package provides the library (`cargo xtask ci` installs it); this
//! module only finds it and names its variables.

use std::path::PathBuf;

/// The thread-safe variant: the daemon runs several threads.
const LIBRARY: &str = "libfaketimeMT.so.1";

/// Where the library is installed: Debian's multiarch directories, then a
/// build from source (`make install`'s default prefix).
fn candidates() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path().join("faketime").join(LIBRARY))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.push(PathBuf::from("/usr/local/lib/faketime").join(LIBRARY));
    found
}

/// The library's path; panics saying how to install it when it is
/// missing, so a test that needs it fails instead of passing unchecked.
pub fn library() -> PathBuf {
    candidates()
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed ({LIBRARY} not found under /usr/lib/*/faketime or \
                 /usr/local/lib/faketime): install Debian's libfaketime package \
                 (apt-get install libfaketime; `cargo xtask ci` does)"
            )
        })
}

/// The variables that start a process with its wall clock shifted by
/// `offset` (libfaketime's relative form: `+1h`, `-1h`, `+90s`) and its
/// monotonic clock left alone, so its timers and sleeps run true.
pub fn shifted_clock(offset: &str) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), library().display().to_string()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}
