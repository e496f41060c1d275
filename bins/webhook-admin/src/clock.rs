//! The clocks and how times are shown. A clock is read once per command,
//! in `main`'s callers, and passed down: every decision takes `now` as an
//! argument, so the explain logic is tested without sleeping. Rows are
//! judged at the database server's time ([`server_now`]), as the daemon
//! judges them; this host's clock ([`now`]) places the times an operator
//! types and the lines the tool prints.
//!
//! Times are shown in UTC next to the raw Unix seconds Phorge stores, so
//! an operator can match them against the table without converting, and
//! read ([`parse_time`]) as Unix seconds, an RFC 3339 UTC timestamp or a
//! time of today (UTC).

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use webhook_core::{Clock, StoreError, UnixTime};
use webhook_daemon::server_clock::{system_time, Measurement};
use webhook_store_mysql::MysqlReader;

/// Unix seconds from this host's clock (a clock before 1970 reads as 0).
pub fn now() -> UnixTime {
    system_time().as_secs()
}

/// Unix seconds on the database server's clock, which the daemon's
/// cutoffs run on: one reading, carried to this moment as the daemon
/// carries it.
pub async fn server_now(reader: &MysqlReader) -> Result<UnixTime, StoreError> {
    let reading = reader.server_time().await?;
    Ok(Measurement::taken(&reading)
        .server_time_at(Instant::now())
        .as_secs())
}

/// The core's [`Clock`] for a command that judges at one moment, for the
/// parts of the core that space their work by it (silent mode's reads):
/// its Unix time is the moment judged at, its monotonic reading this
/// process's, and sleeping on it sleeps for real.
#[derive(Debug)]
pub struct JudgingClock {
    at: UnixTime,
    origin: Instant,
}

impl JudgingClock {
    /// A clock that reads `at`.
    pub fn at(at: UnixTime) -> Self {
        Self {
            at,
            origin: Instant::now(),
        }
    }
}

impl Clock for JudgingClock {
    fn now(&self) -> UnixTime {
        self.at
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// `2023-11-14 22:13:20 UTC`.
pub fn utc(t: UnixTime) -> String {
    let days = t / 86_400;
    let rest = t % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `2023-11-14 22:13:20.123 UTC`: Unix milliseconds, as the attempt
/// history records them.
pub fn utc_ms(ms: u64) -> String {
    let secs = utc(ms / 1_000);
    let stamp = secs.strip_suffix(" UTC").unwrap_or(&secs);
    format!("{stamp}.{:03} UTC", ms % 1_000)
}

/// `2023-11-14 22:13:20 UTC (1700000000, in 1m 40s)`: a moment with its raw
/// value and its distance from `now`.
pub fn moment(t: UnixTime, now: UnixTime) -> String {
    format!("{} ({t}, {})", utc(t), relative(t, now))
}

/// `in 1m 40s`, `1m 40s ago` or `now`.
pub fn relative(t: UnixTime, now: UnixTime) -> String {
    match t.cmp(&now) {
        std::cmp::Ordering::Equal => "now".to_owned(),
        std::cmp::Ordering::Greater => format!("in {}", span(t - now)),
        std::cmp::Ordering::Less => format!("{} ago", span(now - t)),
    }
}

/// A length of time in its two largest units: `45s`, `1m 40s`, `2h 0m`,
/// `3d 4h`.
pub fn span(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3_599 => format!("{}m {}s", secs / 60, secs % 60),
        3_600..=86_399 => format!("{}h {}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

/// A `TIME` argument: Unix seconds (`1764666000`), an RFC 3339 UTC
/// timestamp (`2026-12-02T09:00:00Z`) or `HH:MM` (that time today, UTC, by
/// `now`). The error says what is accepted.
pub fn parse_time(text: &str, now: UnixTime) -> Result<UnixTime, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "{text:?} is not a time: use Unix seconds (1764666000), an RFC 3339 UTC \
             timestamp (2026-12-02T09:00:00Z) or HH:MM (today, UTC)"
        )
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| bad());
    }
    if let Some((hour, minute)) = text.split_once(':').filter(|_| text.len() == 5) {
        let (hour, minute) = (
            two_digits(hour).ok_or_else(bad)?,
            two_digits(minute).ok_or_else(bad)?,
        );
        if hour > 23 || minute > 59 {
            return Err(bad());
        }
        return Ok(now / 86_400 * 86_400 + hour * 3_600 + minute * 60);
    }
    let stamp = text
        .strip_suffix(['Z', 'z'])
        .or_else(|| text.strip_suffix("+00:00"))
        .ok_or_else(bad)?;
    let (date, time) = stamp.split_once(['T', 't']).ok_or_else(bad)?;
    let mut date = date.split('-');
    let mut time = time.split(':');
    let (Some(year), Some(month), Some(day), None) =
        (date.next(), date.next(), date.next(), date.next())
    else {
        return Err(bad());
    };
    let (Some(hour), Some(minute), Some(second), None) =
        (time.next(), time.next(), time.next(), time.next())
    else {
        return Err(bad());
    };
    let year: u64 = (year.len() == 4 && year.bytes().all(|b| b.is_ascii_digit()))
        .then(|| year.parse().ok())
        .flatten()
        .filter(|year| *year >= 1970)
        .ok_or_else(bad)?;
    let [month, day, hour, minute, second] = [month, day, hour, minute, second].map(two_digits);
    let (Some(month), Some(day), Some(hour), Some(minute), Some(second)) =
        (month, day, hour, minute, second)
    else {
        return Err(bad());
    };
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(bad());
    }
    Ok(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// A `TIME` or an age before `now`: what [`parse_time`] reads, or a
/// whole number of seconds, minutes, hours or days ago (`45s`, `30m`,
/// `2h`, `7d`). The error says what is accepted.
pub fn parse_time_or_age(text: &str, now: UnixTime) -> Result<UnixTime, String> {
    let text = text.trim();
    let unit = match text.as_bytes().last() {
        Some(b's') => Some(1),
        Some(b'm') => Some(60),
        Some(b'h') => Some(3_600),
        Some(b'd') => Some(86_400),
        _ => None,
    };
    let Some(unit) = unit else {
        return parse_time(text, now).map_err(|reason| format!("{reason}, or an age (2h, 7d)"));
    };
    let count = &text[..text.len() - 1];
    count
        .parse::<u64>()
        .ok()
        .filter(|_| !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|count| count.checked_mul(unit))
        .map(|age| now.saturating_sub(age))
        .ok_or_else(|| {
            format!(
                "{text:?} is not an age: use a whole number of seconds, minutes, hours or days                  (45s, 30m, 2h, 7d)"
            )
        })
}

/// Exactly two ASCII digits.
fn two_digits(text: &str) -> Option<u64> {
    (text.len() == 2 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A proleptic Gregorian date (year 1970 or later) to days since
/// 1970-01-01: [`civil_from_days`] backwards (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`), so no date crate is needed for one line of output.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_matches_known_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(4_102_444_799), "2099-12-31 23:59:59 UTC");
    }

    #[test]
    fn times_are_read_as_seconds_rfc3339_or_a_time_today() {
        assert_eq!(parse_time("1700000000", 0), Ok(1_700_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20Z", 0), Ok(1_700_000_000));
        assert_eq!(parse_time("2000-02-29T00:00:00+00:00", 0), Ok(951_782_400));
        assert_eq!(parse_time("2099-12-31t23:59:59z", 0), Ok(4_102_444_799));
        assert_eq!(parse_time("1970-01-01T00:00:00Z", 5), Ok(0));
        // 2023-11-14 22:13:20 UTC; 09:00 that day.
        assert_eq!(parse_time("09:00", 1_700_000_000), Ok(1_699_952_400));
        assert_eq!(parse_time("00:00", 1_700_000_000), Ok(1_699_920_000));
        for bad in [
            "",
            "9:00",
            "24:00",
            "12:60",
            "2023-02-29T00:00:00Z",
            "2023-11-14T22:13:20",
            "2023-11-14T22:13:20+01:00",
            "2023-11-14 22:13:20Z",
            "1969-12-31T23:59:59Z",
            "2023-13-01T00:00:00Z",
            "-5",
            "yesterday",
        ] {
            assert!(parse_time(bad, 1_700_000_000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ages_count_back_from_now_and_times_still_read() {
        let now = 1_700_000_000;
        assert_eq!(parse_time_or_age("45s", now), Ok(now - 45));
        assert_eq!(parse_time_or_age("30m", now), Ok(now - 1_800));
        assert_eq!(parse_time_or_age(" 2h ", now), Ok(now - 7_200));
        assert_eq!(parse_time_or_age("7d", now), Ok(now - 604_800));
        assert_eq!(parse_time_or_age("1700000123", now), Ok(1_700_000_123));
        assert_eq!(
            parse_time_or_age("2023-11-14T22:13:20Z", 0),
            Ok(1_700_000_000)
        );
        assert_eq!(parse_time_or_age("99999d", 5), Ok(0));
        for bad in [
            "d",
            "-2h",
            "2x",
            "2 h",
            "1.5h",
            "h2",
            "99999999999999999999d",
            "soon",
        ] {
            let err = parse_time_or_age(bad, now).expect_err(bad);
            assert!(err.contains("2h"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn milliseconds_show_after_the_seconds() {
        assert_eq!(utc_ms(1_700_000_000_123), "2023-11-14 22:13:20.123 UTC");
        assert_eq!(utc_ms(5), "1970-01-01 00:00:00.005 UTC");
    }

    #[test]
    fn days_from_civil_inverts_civil_from_days() {
        for days in [0, 59, 60, 365, 10_956, 11_016, 19_675, 47_481] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
        }
    }

    #[test]
    fn relative_and_span() {
        assert_eq!(relative(100, 100), "now");
        assert_eq!(relative(200, 100), "in 1m 40s");
        assert_eq!(relative(100, 145), "45s ago");
        assert_eq!(span(7_200), "2h 0m");
        assert_eq!(span(93_600), "1d 2h");
        assert_eq!(
            moment(1_700_000_050, 1_700_000_000),
            "2023-11-14 22:14:10 UTC (1700000050, in 50s)"
        );
    }
}
