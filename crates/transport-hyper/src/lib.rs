//! The `Transport` on hyper + rustls. Not written yet (issue 4).
