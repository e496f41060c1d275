//! `Connector`: where every statement of this crate gets its connection —
//! the bounded pools of [`crate::session`] and the herald database that
//! errors are reported against.
//!
//! The reader, the store and the store's group-commit workers share one
//! (a clone shares the pools), and it sits below all of them: it knows
//! nothing of what they run.

use std::time::Duration;

use mysql_async::prelude::StatementLike;
use mysql_async::{Opts, Params, Row};
use webhook_core::StoreError;

use crate::error::MysqlError;
use crate::session::{Pools, Session};

/// The pools (replaced after a timeout), and the database their errors
/// are reported against.
#[derive(Clone)]
pub(crate) struct Connector {
    pools: Pools,
    pub(crate) database: String,
}

impl Connector {
    /// A lazy pool over `opts`: nothing connects yet.
    pub(crate) fn new(
        opts: Opts,
        database: String,
        connect_timeout: Duration,
        statement_timeout: Duration,
    ) -> Self {
        Self {
            pools: Pools::new(opts, connect_timeout, statement_timeout),
            database,
        }
    }

    /// A pooled connection within the connect timeout ([`Pools::connect`]).
    pub(crate) async fn connect(&self) -> Result<Session, MysqlError> {
        self.pools.connect().await
    }

    /// [`Pools::connect_standalone`], failing as a store error.
    pub(crate) async fn standalone(&self) -> Result<Session, StoreError> {
        self.pools
            .connect_standalone()
            .await
            .map_err(|err| err.into_store_error(&self.database))
    }

    /// [`Self::connect`], failing as a store error.
    pub(crate) async fn conn(&self) -> Result<Session, StoreError> {
        self.connect()
            .await
            .map_err(|err| err.into_store_error(&self.database))
    }

    /// The first row `statement` answers, on a connection of its own.
    pub(crate) async fn first_row<S, P>(
        &self,
        statement: S,
        params: P,
    ) -> Result<Option<Row>, StoreError>
    where
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let mut conn = self.conn().await?;
        conn.exec_first(statement, params)
            .await
            .map_err(|err| self.statement_error(err))
    }

    /// Every row `statement` answers, on a connection of its own.
    pub(crate) async fn all_rows<S, P>(
        &self,
        statement: S,
        params: P,
    ) -> Result<Vec<Row>, StoreError>
    where
        S: StatementLike,
        P: Into<Params> + Send,
    {
        let mut conn = self.conn().await?;
        conn.exec(statement, params)
            .await
            .map_err(|err| self.statement_error(err))
    }

    pub(crate) fn statement_error(&self, err: impl Into<Failure>) -> StoreError {
        err.into().0.into_store_error(&self.database)
    }

    /// A statement answered with something it never answers.
    pub(crate) fn unexpected(&self, statement: &'static str, detail: &str) -> StoreError {
        MysqlError::UnexpectedResult {
            statement,
            detail: detail.to_owned(),
        }
        .into_store_error(&self.database)
    }

    /// How many times the pool was replaced after a timeout.
    pub(crate) fn replacements(&self) -> u64 {
        self.pools.replacements()
    }

    /// The statement timeout.
    pub(crate) fn statement_timeout(&self) -> Duration {
        self.pools.statement_timeout()
    }

    /// Closes the current pool once every borrowed connection is back, or
    /// gives up after `bound` ([`Pools::disconnect`]).
    pub(crate) async fn disconnect(&self, bound: Duration) -> Result<(), StoreError> {
        self.pools
            .disconnect(bound)
            .await
            .map_err(|err| self.statement_error(err))
    }
}

/// A failure of a statement: the driver's, or the statement timeout.
pub(crate) struct Failure(MysqlError);

impl From<mysql_async::Error> for Failure {
    fn from(err: mysql_async::Error) -> Self {
        Self(MysqlError::Statement(err))
    }
}

impl From<MysqlError> for Failure {
    fn from(err: MysqlError) -> Self {
        Self(err)
    }
}
