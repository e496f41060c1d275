//! `sign` and `verify` over standard input, with core's `sign` / `verify`
//! (the daemon's own HMAC-SHA256), so what this prints is exactly what a
//! receiver gets in the signature header.

use std::io::Read;

use webhook_core::{sign, verify};

use crate::cli::KeyArgs;
use crate::error::{exit, AdminError};
use crate::out::emit_line;

/// The key `args` give, if any: `--key` or `WEBHOOK_HMAC_KEY`, or the
/// first line of `--key-file`.
pub fn key_given(args: &KeyArgs) -> Result<Option<String>, AdminError> {
    match (&args.key, &args.key_file) {
        (_, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|err| {
                AdminError::Usage(format!("--key-file {}: {err}", path.display()))
            })?;
            Ok(Some(text.trim_end_matches(['\n', '\r']).to_owned()))
        }
        (Some(key), None) => Ok(Some(key.clone())),
        (None, None) => Ok(None),
    }
}

/// The key `args` must give.
pub fn key_required(args: &KeyArgs) -> Result<String, AdminError> {
    key_given(args)?.ok_or_else(|| {
        AdminError::Usage("a key is needed: --key-file PATH, WEBHOOK_HMAC_KEY or --key".into())
    })
}

fn stdin_bytes() -> Result<Vec<u8>, AdminError> {
    let mut body = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut body)
        .map_err(AdminError::Stdin)?;
    Ok(body)
}

/// `sign --key K`: the signature of stdin, one line.
pub fn run_sign(key: &str) -> Result<u8, AdminError> {
    let body = stdin_bytes()?;
    emit_line(sign(key.as_bytes(), &body))?;
    Ok(exit::OK)
}

/// `verify --key K --signature S`: 0 when S signs stdin under K, else 1.
pub fn run_verify(key: &str, signature: &str) -> Result<u8, AdminError> {
    let body = stdin_bytes()?;
    if verify(key.as_bytes(), &body, signature) {
        emit_line(format!("signature matches ({} bytes)", body.len()))?;
        Ok(exit::OK)
    } else {
        emit_line(format!(
            "signature does NOT match ({} bytes; expected {})",
            body.len(),
            sign(key.as_bytes(), &body)
        ))?;
        Ok(exit::CHECK_FAILED)
    }
}
