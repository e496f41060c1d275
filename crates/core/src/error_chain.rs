//! An error and its causes written on one line, `: `-joined, for log lines
//! and test messages: the stores and the transport wrap driver errors, and
//! the driver's own reason is usually in a source.

use std::error::Error;

/// `err` and each of its sources in turn, `: `-joined.
pub fn error_chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
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

    #[test]
    fn every_cause_is_joined_in_order() {
        let err = Outer(std::io::Error::other("refused"));
        assert_eq!(error_chain(&err), "outer: refused");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
