//! An error and its causes written on one line, `: `-joined, for log lines
//! and test messages: the stores and the transport wrap driver errors, and
//! the driver's own reason is usually in a source.

use std::error::Error;

/// `err` and each of its sources in turn, `: `-joined, each cause once: a
/// source whose text the line already holds (an error that shows its
/// source's reason in its own words, a driver that repeats its inner
/// error) is left out, so a reader sees `ERROR 1146 …` once however many
/// layers carry it.
pub fn error_chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    /// Shows its source's words and returns it as the source too, as
    /// `StoreError::Query` does.
    #[derive(Debug, thiserror::Error)]
    #[error("query failed: {0}")]
    struct Repeating(#[source] std::io::Error);

    #[test]
    fn every_cause_is_joined_in_order() {
        let err = Outer(std::io::Error::other("refused"));
        assert_eq!(error_chain(&err), "outer: refused");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let err = Repeating(std::io::Error::other(
            "ERROR 1146 (42S02): Table 'x_config.config_entry' doesn't exist",
        ));
        assert_eq!(
            error_chain(&err),
            "query failed: ERROR 1146 (42S02): Table 'x_config.config_entry' doesn't exist"
        );
    }
}
