//! The bounds of `mysql_async`'s process-wide buffer pool, set before the
//! driver first reads them.
//!
//! The driver keeps every packet buffer it is done with in one global pool
//! for reuse: by default up to 128 of them, each shrunk to 4 MiB at most.
//! The daemon has at most `GORGE_WEBHOOK_MYSQL_POOL_MAX` + lock sessions
//! connections (20 by default), each using a buffer or two at a time, so
//! the default keeps far more buffers than are ever reused; at 512 calls
//! in flight the idle ones were about 4 MiB of the daemon's resident set
//! (docs/performance.md). The driver's only knobs are environment
//! variables, read once when the pool is first used; this module owns
//! them, so no other crate needs to know the driver.
//!
//! It must not override what the operator set, and it must run while the
//! process has one thread: setting the environment races with any other
//! thread reading it (`getenv` in a name lookup, say).

/// Idle buffers kept for reuse (the driver's default: 128).
pub const BUFFER_POOL_CAP: (&str, &str) = ("MYSQL_ASYNC_BUFFER_POOL_CAP", "16");

/// The capacity an idle buffer is shrunk to before it is kept (the
/// driver's default: 4 MiB). A group commit's statement can be far longer;
/// its buffer is shrunk when the statement has gone.
pub const BUFFER_SIZE_CAP: (&str, &str) = ("MYSQL_ASYNC_BUFFER_SIZE_CAP", "4096");

/// Sets `BUFFER_POOL_CAP` and `BUFFER_SIZE_CAP` where the environment
/// does not name them already.
///
/// Call it first thing in `main`, before the runtime or any other thread
/// starts and before any `mysql_async` use; later calls change nothing the
/// driver sees.
pub fn bound_driver_buffers() {
    for (name, value) in [BUFFER_POOL_CAP, BUFFER_SIZE_CAP] {
        if std::env::var_os(name).is_none() {
            // Safe to call in edition 2021, and sound here: the caller
            // guarantees no other thread exists yet (see above).
            std::env::set_var(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_are_numbers_the_driver_parses() {
        for (_, value) in [BUFFER_POOL_CAP, BUFFER_SIZE_CAP] {
            assert!(value.parse::<usize>().is_ok_and(|n| n > 0), "{value}");
        }
    }
}
