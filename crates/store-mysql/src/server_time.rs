//! The database server's clock, read once (`sql::SERVER_TIME`) between
//! two readings of this host's monotonic clock. What the reading means —
//! the server's time now, this host's skew — is computed by the daemon's
//! clock and `webhook-admin doctor`, from these three values alone.

use std::time::{Duration, Instant};

use mysql_async::Row;
use webhook_core::StoreError;

use crate::connector::Connector;
use crate::rows;
use crate::sql;

/// One reading of the server's clock: the server started the statement at
/// `server`, somewhere between `sent` and `answered` on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerTimeReading {
    /// The server's time since the Unix epoch when it started the
    /// statement.
    pub server: Duration,
    /// This host's monotonic clock just before the statement went out (its
    /// connection already in hand, so a wait for the pool is not counted).
    pub sent: Instant,
    /// This host's monotonic clock just after the answer arrived.
    pub answered: Instant,
}

/// Reads the server's clock on a pooled connection.
pub(crate) async fn read(connector: &Connector) -> Result<ServerTimeReading, StoreError> {
    let mut conn = connector.conn().await?;
    let sent = Instant::now();
    let row: Option<Row> = conn
        .exec_first(sql::SERVER_TIME, ())
        .await
        .map_err(|err| connector.statement_error(err))?;
    let answered = Instant::now();
    let mut row = row.ok_or_else(|| connector.unexpected("server time", "no row"))?;
    let secs = rows::unsigned(&mut row, 0, "UNIX_TIMESTAMP()", 0)?;
    let micros = rows::unsigned(&mut row, 1, "MICROSECOND(NOW(6))", 0)?;
    let micros = u32::try_from(micros)
        .ok()
        .filter(|micros| *micros < 1_000_000)
        .ok_or_else(|| connector.unexpected("server time", "microseconds out of range"))?;
    Ok(ServerTimeReading {
        server: Duration::new(secs, micros * 1_000),
        sent,
        answered,
    })
}
