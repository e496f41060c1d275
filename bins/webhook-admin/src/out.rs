//! Writing answers to standard output. A reader that goes away early
//! (`webhook-admin hooks | head -3`) ends the output quietly, where
//! `println!` would panic; any other write failure is an error (exit 1).

use std::io::{ErrorKind, Write};

use crate::error::AdminError;

/// Writes `bytes` exactly and flushes.
pub fn emit_bytes(bytes: &[u8]) -> Result<(), AdminError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == ErrorKind::BrokenPipe => Ok(()),
        Err(err) => Err(AdminError::Output(err)),
    }
}

/// Writes `text` as is.
pub fn emit(text: &str) -> Result<(), AdminError> {
    emit_bytes(text.as_bytes())
}

/// Writes `text` and a newline.
pub fn emit_line(text: impl std::fmt::Display) -> Result<(), AdminError> {
    emit(&format!("{text}\n"))
}
