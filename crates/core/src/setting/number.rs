//! Whole-number settings: the [`Bounds`] a declaration gives as data (its
//! [`Unit`], least and greatest value, what 0 means), the one rule that
//! checks a number against them, and [`WholeNumber`], how a number in a
//! unit becomes the setting's type (a count, a size, a duration) and back.

use std::fmt;
use std::time::Duration;

/// What a whole-number setting counts: how its bounds and values read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A plain count (connections, rows, redirects).
    Count,
    /// Bytes.
    Bytes,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Secs,
}

impl Unit {
    /// `n` in this unit as listings show a value: `8`, `65536 bytes`,
    /// `1000 ms`, `30 s`.
    pub fn show(self, n: u64) -> String {
        match self.symbol() {
            "" => n.to_string(),
            symbol => format!("{n} {symbol}"),
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            Self::Count => "",
            Self::Bytes => "bytes",
            Self::Millis => "ms",
            Self::Secs => "s",
        }
    }
}

/// What 0 means for a whole-number setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// Nothing of its own: 0 is held to the bounds like any number.
    InBounds,
    /// Accepted below the least value: it turns something off, as the
    /// setting's help says.
    Off,
    /// The variable set to 0 reads as its default.
    Default,
}

/// The numbers a whole-number setting accepts, declared with it: checked
/// whenever the setting is read (and by the types that combine settings,
/// for values built in code), and shown by `--help` and `webhook-admin
/// config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// What the numbers count.
    pub unit: Unit,
    /// The least value (0 aside, see [`zero`](Self::zero)).
    pub min: u64,
    /// The greatest value; `None` = as large as the setting's type holds.
    pub max: Option<u64>,
    /// What 0 means.
    pub zero: Zero,
}

impl Bounds {
    /// From `min` to `max`, both included.
    pub const fn between(min: u64, max: u64, unit: Unit) -> Self {
        Self {
            unit,
            min,
            max: Some(max),
            zero: Zero::InBounds,
        }
    }

    /// `min` or more.
    pub const fn at_least(min: u64, unit: Unit) -> Self {
        Self {
            unit,
            min,
            max: None,
            zero: Zero::InBounds,
        }
    }

    /// The same bounds, with 0 meaning `zero`.
    pub const fn or_zero(self, zero: Zero) -> Self {
        Self { zero, ..self }
    }

    /// Whether a value of `n` is within the bounds (0 read as a default is
    /// not a value: see [`Zero::Default`]).
    pub fn admits(&self, n: u64) -> bool {
        (n == 0 && self.zero == Zero::Off) || (n >= self.min && self.max.is_none_or(|max| n <= max))
    }

    /// Whether every whole number fits (so there is nothing to show).
    pub fn is_open(&self) -> bool {
        self.min == 0 && self.max.is_none()
    }
}

/// `between 10 and 3600000 ms`, `at least 1 ms`, `0 or between 1024 and
/// 102400 bytes`, `0 (the default) or at least 1`: what a refusal says
/// the value must be, and what `--help` lists as allowed.
impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.zero {
            Zero::InBounds => {}
            Zero::Off => f.write_str("0 or ")?,
            Zero::Default => f.write_str("0 (the default) or ")?,
        }
        let unit = match self.unit.symbol() {
            "" => String::new(),
            symbol => format!(" {symbol}"),
        };
        match self.max {
            Some(max) => write!(f, "between {} and {max}{unit}", self.min),
            None => write!(f, "at least {}{unit}", self.min),
        }
    }
}

/// A type a whole-number setting reads into.
pub trait WholeNumber: Sized {
    /// `n` counted in `unit`, or `None` when the type cannot hold it.
    fn from_number(n: u64, unit: Unit) -> Option<Self>;
    /// The value counted in `unit`, rounded up (a duration built in code
    /// may be finer than the unit its variable counts in), or `None` when
    /// no number in `unit` reads as it.
    fn to_number(&self, unit: Unit) -> Option<u64>;
}

macro_rules! whole_number_for_integers {
    ($($int:ty),*) => {$(
        impl WholeNumber for $int {
            fn from_number(n: u64, _unit: Unit) -> Option<Self> {
                Self::try_from(n).ok()
            }
            fn to_number(&self, _unit: Unit) -> Option<u64> {
                u64::try_from(*self).ok()
            }
        }
    )*};
}

whole_number_for_integers!(u16, u32, u64, usize);

/// A duration in milliseconds or seconds; a count or a size is no
/// duration, so such a declaration reads nothing (and its default fails
/// its crate's tests).
impl WholeNumber for Duration {
    fn from_number(n: u64, unit: Unit) -> Option<Self> {
        match unit {
            Unit::Millis => Some(Self::from_millis(n)),
            Unit::Secs => Some(Self::from_secs(n)),
            Unit::Count | Unit::Bytes => None,
        }
    }

    fn to_number(&self, unit: Unit) -> Option<u64> {
        let nanos_per_unit: u128 = match unit {
            Unit::Millis => 1_000_000,
            Unit::Secs => 1_000_000_000,
            Unit::Count | Unit::Bytes => return None,
        };
        u64::try_from(self.as_nanos().div_ceil(nanos_per_unit)).ok()
    }
}

/// A duration that 0 turns off; a duration of zero is therefore none that
/// a number reads as.
impl WholeNumber for Option<Duration> {
    fn from_number(n: u64, unit: Unit) -> Option<Self> {
        match n {
            0 => Some(None),
            n => Duration::from_number(n, unit).map(Some),
        }
    }

    fn to_number(&self, unit: Unit) -> Option<u64> {
        match self {
            None => Some(0),
            Some(duration) if duration.is_zero() => None,
            Some(duration) => duration.to_number(unit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_as_a_refusal_says_them() {
        let poll = Bounds::between(10, 3_600_000, Unit::Millis);
        assert_eq!(poll.to_string(), "between 10 and 3600000 ms");
        assert!(poll.admits(10) && poll.admits(3_600_000));
        assert!(!poll.admits(9) && !poll.admits(3_600_001) && !poll.admits(0));
        let head = Bounds::between(1024, 102_400, Unit::Bytes).or_zero(Zero::Off);
        assert_eq!(head.to_string(), "0 or between 1024 and 102400 bytes");
        assert!(head.admits(0) && !head.admits(1023));
        let pool = Bounds::at_least(1, Unit::Count).or_zero(Zero::Default);
        assert_eq!(pool.to_string(), "0 (the default) or at least 1");
        assert!(!pool.admits(0), "0 is read as the default, it is no value");
        assert!(pool.admits(u64::MAX));
        assert!(Bounds::at_least(0, Unit::Count).is_open());
    }

    #[test]
    fn durations_count_in_their_unit_rounded_up() {
        let ms = Duration::from_millis(1_500);
        assert_eq!(ms.to_number(Unit::Millis), Some(1_500));
        assert_eq!(ms.to_number(Unit::Secs), Some(2), "rounded up");
        assert_eq!(Duration::ZERO.to_number(Unit::Secs), Some(0));
        assert_eq!(
            Duration::from_number(3, Unit::Secs),
            Some(Duration::from_secs(3))
        );
        assert_eq!(Duration::from_number(3, Unit::Count), None);
        assert_eq!(Option::<Duration>::from_number(0, Unit::Secs), Some(None));
        assert_eq!(None::<Duration>.to_number(Unit::Secs), Some(0));
        assert_eq!(Some(Duration::ZERO).to_number(Unit::Secs), None);
        assert_eq!(u16::from_number(65_536, Unit::Count), None);
    }
}
