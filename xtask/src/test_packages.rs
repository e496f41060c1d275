//! Debian packages the tests run as real programs, installed with apt-get
//! when dpkg does not list them, as `prometheus` installs promtool:
//!
//! - `libfaketime`, for the clock tests, which run the daemon and
//!   `webhook-admin` with their wall clock shifted an hour
//!   (`bins/webhook-daemon/tests/it/clock_skew.rs`, the doctor's clock
//!   check);
//! - `tinyproxy-bin`, the egress proxy the proxy tests deliver through
//!   (`crates/transport-hyper/tests/it/proxy.rs`, the daemon's and the
//!   doctor's); only the binary, no service.
//!
//! Without them those tests fail saying so.

use crate::apt_install;

/// Each package, and what needs it.
const PACKAGES: [(&str, &str); 2] = [
    ("libfaketime", "the clock tests"),
    ("tinyproxy-bin", "the egress proxy tests"),
];

/// Installs whichever of [`PACKAGES`] dpkg does not list as installed.
pub(crate) fn ensure_installed() -> Result<(), String> {
    for (package, needed_by) in PACKAGES {
        if crate::dpkg_installed(package) {
            continue;
        }
        eprintln!(
            "xtask: {package} is not installed; installing Debian's {package} package for \
             {needed_by} (once per machine)"
        );
        apt_install(&[package]).map_err(|err| {
            format!("{err}; install {package} (Debian: apt-get install {package})")
        })?;
    }
    Ok(())
}
