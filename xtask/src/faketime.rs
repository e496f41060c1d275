//! libfaketime for the clock tests, which run the daemon and
//! `webhook-admin` with their wall clock shifted an hour
//! (`bins/webhook-daemon/tests/it/clock_skew.rs`, the doctor's clock
//! check): Debian's `libfaketime`, installed with apt-get when dpkg does
//! not list it, as `prometheus` installs promtool. Without it those tests
//! fail saying so.

use crate::apt_install;

/// The package that provides the library.
const PACKAGE: &str = "libfaketime";

/// Installs libfaketime if dpkg does not list it as installed.
pub(crate) fn ensure_installed() -> Result<(), String> {
    if crate::dpkg_installed(PACKAGE) {
        return Ok(());
    }
    eprintln!("xtask: {PACKAGE} is not installed; installing Debian's {PACKAGE} package (once per machine)");
    apt_install(&[PACKAGE])
        .map_err(|err| format!("{err}; install libfaketime (Debian: apt-get install {PACKAGE})"))
}
