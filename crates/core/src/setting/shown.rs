//! How a text setting's value reads in listings (`webhook-admin config`):
//! [`Shown`] for the value types the declarations use. A declaration whose
//! value reads better another way says so with
//! [`Setting::shown_as`](super::Setting::shown_as).

use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A setting's value as a listing shows it.
pub trait Shown {
    /// The value in a few words.
    fn shown(&self) -> String;
}

impl Shown for String {
    fn shown(&self) -> String {
        self.clone()
    }
}

impl Shown for bool {
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl Shown for SocketAddr {
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// Nothing set reads `(none)`.
impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        self.as_ref()
            .map_or_else(|| "(none)".to_owned(), Shown::shown)
    }
}

/// The items, comma-separated; an empty list reads `(none)`.
impl<T: Display> Shown for Vec<T> {
    fn shown(&self) -> String {
        if self.is_empty() {
            return "(none)".to_owned();
        }
        self.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}
