//! `Sight`: the one rule for what the two silent-mode readings add up to —
//! held when any readable source says silent, and "seen" only where
//! Phorge's local config is read — for the daemon and `webhook-admin
//! doctor` alike. Pure: it reads nothing itself.

/// Where Phorge may keep `phabricator.silent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `conf/local/local.json`, where `bin/config set` writes it.
    LocalConfig,
    /// `{namespace}_config.config_entry`, which Phorge's tools never write
    /// for this key.
    Database,
}

impl Source {
    /// The name used in logs and metric labels.
    pub fn label(self) -> &'static str {
        match self {
            Self::LocalConfig => "local_config",
            Self::Database => "database",
        }
    }
}

/// What one source showed at the last check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Not configured: no path for Phorge's local config was given.
    NotSet,
    /// Not read yet.
    Unchecked,
    /// Read: `phabricator.silent` is on.
    On,
    /// Read: `phabricator.silent` is off or absent.
    Off,
    /// Could not be read (missing, malformed, no grant).
    Unreadable,
}

impl Reading {
    /// Read at the last check, so silent mode set there would be seen.
    pub fn is_visible(self) -> bool {
        matches!(self, Self::On | Self::Off)
    }

    /// The reading of one answer from a source.
    pub fn of<E>(result: &Result<bool, E>) -> Self {
        match result {
            Ok(true) => Self::On,
            Ok(false) => Self::Off,
            Err(_) => Self::Unreadable,
        }
    }
}

/// What the silent-mode check sees, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Not checked yet.
    Unchecked,
    /// Phorge's local config is read and says off (the database entry says
    /// off too, or cannot be read): delivering.
    Off,
    /// A readable source says on: holding delivery.
    On,
    /// Only the database entry is read, and says off; Phorge's local config
    /// is not set or not readable: delivering, blind to silent mode set
    /// with `bin/config set`.
    DatabaseOnly,
    /// No source can be read: delivering, unable to see silent mode.
    Invisible,
}

/// Both sources' readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sight {
    /// Phorge's `conf/local/local.json`.
    pub local_config: Reading,
    /// Phorge's `config_entry` table.
    pub database: Reading,
}

impl Sight {
    /// Delivery is held when any source that can be read says silent.
    pub fn held(&self) -> bool {
        self.local_config == Reading::On || self.database == Reading::On
    }

    /// What the readings add up to.
    pub fn visibility(&self) -> Visibility {
        if self.held() {
            return Visibility::On;
        }
        match (self.local_config, self.database) {
            (Reading::Off, _) => Visibility::Off,
            (Reading::Unchecked, _) | (_, Reading::Unchecked) => Visibility::Unchecked,
            (_, Reading::Off) => Visibility::DatabaseOnly,
            _ => Visibility::Invisible,
        }
    }

    /// One source's reading.
    pub fn reading(&self, source: Source) -> Reading {
        match source {
            Source::LocalConfig => self.local_config,
            Source::Database => self.database,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_readable_source_saying_silent_holds_and_only_the_file_counts_as_seeing() {
        use Reading::*;
        use Visibility as V;
        let cases = [
            (On, On, V::On),
            (On, Off, V::On),
            (On, Unreadable, V::On),
            (Off, On, V::On),
            (NotSet, On, V::On),
            (Unreadable, On, V::On),
            (Off, Off, V::Off),
            (Off, Unreadable, V::Off),
            (NotSet, Off, V::DatabaseOnly),
            (Unreadable, Off, V::DatabaseOnly),
            (NotSet, Unreadable, V::Invisible),
            (Unreadable, Unreadable, V::Invisible),
            (NotSet, Unchecked, V::Unchecked),
            (Unchecked, Unchecked, V::Unchecked),
        ];
        for (local_config, database, expected) in cases {
            let sight = Sight {
                local_config,
                database,
            };
            assert_eq!(sight.visibility(), expected, "{sight:?}");
            assert_eq!(sight.held(), expected == V::On, "{sight:?}");
        }
    }
}
