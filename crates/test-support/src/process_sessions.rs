//! One process's database sessions as the server sees them: the rows of
//! `information_schema.PROCESSLIST` whose `HOST` (`127.0.0.1:<port>`) is
//! one of that process's own TCP client ports to the server. The ports
//! come from its socket inodes (`/proc/<pid>/fd`) matched against
//! `/proc/net/tcp{,6}`, so no other client's sessions (the test's own, on
//! the same database) are counted. The e2e tests kill a daemon's sessions
//! by them; the bench counts them.

use std::collections::HashSet;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

/// The local ports of `pid`'s TCP connections to `server_port`.
pub fn client_ports(pid: u32, server_port: u16) -> HashSet<u16> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let text = target.to_string_lossy().into_owned();
            text.strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .map(str::to_owned)
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| socket_line(line, server_port, &inodes))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One `/proc/net/tcp` line: its local port if it is one of `inodes` and
/// its remote port is `server_port`.
fn socket_line(line: &str, server_port: u16, inodes: &HashSet<String>) -> Option<u16> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let port = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok())
    };
    let (local, remote, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
    (port(remote)? == server_port && inodes.contains(*inode)).then_some(port(local)?)
}

/// The server's session ids of `pid`'s connections to `server_port`.
pub async fn session_ids(
    conn: &mut Conn,
    pid: u32,
    server_port: u16,
) -> Result<Vec<u64>, mysql_async::Error> {
    let ports = client_ports(pid, server_port);
    if ports.is_empty() {
        return Ok(Vec::new());
    }
    let sessions: Vec<(u64, Option<String>)> = conn
        .query("SELECT ID, HOST FROM information_schema.PROCESSLIST")
        .await?;
    Ok(sessions
        .into_iter()
        .filter(|(_, host)| {
            host.as_deref()
                .and_then(|host| host.rsplit_once(':'))
                .and_then(|(_, port)| port.parse::<u16>().ok())
                .is_some_and(|port| ports.contains(&port))
        })
        .map(|(id, _)| id)
        .collect())
}
