//! The wall clock and how times are shown. The clock is read once per
//! command, in `main`'s callers, and passed down: every decision takes
//! `now` as an argument, so the explain logic is tested without sleeping.
//!
//! Times are shown in UTC next to the raw Unix seconds Phorge stores, so
//! an operator can match them against the table without converting.

use std::time::{SystemTime, UNIX_EPOCH};

use webhook_core::UnixTime;

/// Unix seconds from the host clock, as the daemon reads them for its
/// cutoffs (a clock before 1970 reads as 0).
pub fn now() -> UnixTime {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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
