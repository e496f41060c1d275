//! The fuzz checks under plain `cargo test` (one binary, as elsewhere in
//! the workspace): the reference encoder against protocol §7's vectors, every
//! committed corpus and regression input, pseudo-random inputs from fixed
//! seeds, and the findings of the fuzz runs as regression tests.

mod findings;
mod reference;
mod replay;
