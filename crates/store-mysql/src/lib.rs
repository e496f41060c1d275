//! The `Store` on MySQL/MariaDB. Not written yet (issue 3).
