//! Reading a scraped `/metrics` page: its sample lines as `(series, value)`
//! pairs, a series named exactly as rendered (`name{labels}`), and one
//! sample's value. The one reader the e2e tests and the bench share.

/// Every sample line that has a numeric value, as `(series, value)`, the
/// series exactly as rendered (`name{labels}`); comments and anything
/// unparsable are passed over.
pub fn samples(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines().filter_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        Some((series, value.trim().parse().ok()?))
    })
}

/// The value of one sample line, `name{labels}` exactly as rendered.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    samples(text)
        .find(|(name, _)| *name == series)
        .map(|(_, value)| value)
}

/// [`sample`] of a counter or gauge that must be present, as a count.
pub fn count(text: &str, series: &str) -> u64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in\n{text}")) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_by_exact_series() {
        let text = "gorge_webhook_claims_total{result=\"won\"} 12\n\
                    gorge_webhook_claims_total{result=\"lost\"} 3\n\
                    gorge_webhook_in_flight 0\n";
        assert_eq!(
            count(text, "gorge_webhook_claims_total{result=\"won\"}"),
            12
        );
        assert_eq!(
            count(text, "gorge_webhook_claims_total{result=\"lost\"}"),
            3
        );
        assert_eq!(count(text, "gorge_webhook_in_flight"), 0);
        assert_eq!(sample(text, "gorge_webhook_claims_total"), None);
    }
}
