//! Makes sure the local MariaDB the tests use (127.0.0.1:3306) is up,
//! starting the installed server when it is not.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const ADDRESS: ([u8; 4], u16) = ([127, 0, 0, 1], 3306);
const SERVER: &str = "/usr/sbin/mariadbd";
const START_DEADLINE: Duration = Duration::from_secs(90);

fn reachable() -> bool {
    let addr = SocketAddr::from(ADDRESS);
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

/// Returns once MariaDB accepts connections, starting it if needed.
pub(crate) fn ensure_running() -> Result<(), String> {
    if reachable() {
        return Ok(());
    }
    if !Path::new(SERVER).exists() {
        return Err(format!(
            "MariaDB is not reachable on 127.0.0.1:3306 and {SERVER} is not installed"
        ));
    }
    eprintln!("xtask: starting MariaDB ({SERVER})");
    let status = Command::new("start-stop-daemon")
        .args(["--start", "--oknodo", "--background", "--exec", SERVER])
        .status()
        .map_err(|e| format!("could not run start-stop-daemon: {e}"))?;
    if !status.success() {
        return Err(format!("start-stop-daemon failed ({status})"));
    }
    let started = Instant::now();
    while started.elapsed() < START_DEADLINE {
        if reachable() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!(
        "MariaDB did not accept connections within {}s",
        START_DEADLINE.as_secs()
    ))
}
