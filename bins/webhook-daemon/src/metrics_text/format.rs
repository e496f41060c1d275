//! `/metrics`' two text formats and which one a request asks for: the
//! Prometheus text format 0.0.4 unless the `Accept` header prefers
//! OpenMetrics 1.0.0, as Prometheus' own scraper says with q-values.

/// A text format `/metrics` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4: the default, and what every tool
    /// that reads `/metrics` (promtool, agents, `curl`) understands.
    Prometheus,
    /// OpenMetrics 1.0.0, for a client whose `Accept` header prefers it.
    OpenMetrics,
}

/// One of our formats as a media type, to match `Accept` ranges against.
struct Offer {
    format: Format,
    kind: &'static str,
    subtype: &'static str,
    version: &'static str,
}

/// Ours, the default first.
const OFFERS: [Offer; 2] = [
    Offer {
        format: Format::Prometheus,
        kind: "text",
        subtype: "plain",
        version: "0.0.4",
    },
    Offer {
        format: Format::OpenMetrics,
        kind: "application",
        subtype: "openmetrics-text",
        version: "1.0.0",
    },
];

impl Format {
    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// The format the `Accept` header values ask for: OpenMetrics when it
    /// gets a higher q-value than the Prometheus text format, which is
    /// answered otherwise (no header, a tie, nothing acceptable: a scrape
    /// is better served than refused). Each format's q-value is that of
    /// the most specific range naming it (`type/subtype` with a matching
    /// `version` over `type/subtype` over `type/*` over `*/*`); a range
    /// naming another version does not name it.
    pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Self {
        // Per offer: the specificity and q-value of the range naming it.
        let mut best = [None::<(u8, f32)>; OFFERS.len()];
        for range in accept.into_iter().flat_map(|value| value.split(',')) {
            let Some(range) = Range::parse(range) else {
                continue;
            };
            for (offer, best) in OFFERS.iter().zip(&mut best) {
                if let Some(specificity) = range.names(offer) {
                    if best.is_none_or(|(seen, _)| specificity > seen) {
                        *best = Some((specificity, range.q));
                    }
                }
            }
        }
        let q = |offer: usize| best[offer].map_or(0.0, |(_, q)| q);
        // The first offer, the default, keeps a tie.
        let mut chosen = 0;
        for offer in 1..OFFERS.len() {
            if q(offer) > q(chosen) {
                chosen = offer;
            }
        }
        OFFERS[chosen].format
    }
}

/// One media range of an `Accept` header.
struct Range<'a> {
    kind: &'a str,
    subtype: &'a str,
    version: Option<&'a str>,
    q: f32,
}

impl<'a> Range<'a> {
    /// `type/subtype;param=value…`; `None` for what is not a media range
    /// or carries an unreadable q-value.
    fn parse(text: &'a str) -> Option<Self> {
        let mut parts = text.split(';').map(str::trim);
        let (kind, subtype) = parts.next()?.split_once('/')?;
        let mut range = Range {
            kind,
            subtype,
            version: None,
            q: 1.0,
        };
        for param in parts {
            let Some((name, value)) = param.split_once('=') else {
                continue;
            };
            let value = value.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "q" => range.q = value.parse().ok().filter(|q| (0.0..=1.0).contains(q))?,
                "version" => range.version = Some(value),
                _ => {}
            }
        }
        Some(range)
    }

    /// How specifically this range names `offer`, if it does (3: type,
    /// subtype and version; 2: type and subtype; 1: `type/*`; 0: `*/*`).
    fn names(&self, offer: &Offer) -> Option<u8> {
        let kind = self.kind.eq_ignore_ascii_case(offer.kind);
        let subtype = self.subtype.eq_ignore_ascii_case(offer.subtype);
        match (self.kind, self.subtype) {
            ("*", "*") => Some(0),
            (_, "*") if kind => Some(1),
            _ if kind && subtype => match self.version {
                None => Some(2),
                Some(version) if version == offer.version => Some(3),
                Some(_) => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn negotiate(accept: &[&str]) -> Format {
        Format::negotiate(accept.iter().copied())
    }

    #[test]
    fn the_prometheus_text_format_is_the_default() {
        assert_eq!(negotiate(&[]), Format::Prometheus);
        assert_eq!(negotiate(&["*/*"]), Format::Prometheus);
        assert_eq!(negotiate(&["application/json"]), Format::Prometheus);
        assert_eq!(negotiate(&["text/plain;version=0.0.4"]), Format::Prometheus);
        assert_eq!(negotiate(&["text/plain"]), Format::Prometheus);
        assert_eq!(negotiate(&["garbage, ;;, /"]), Format::Prometheus);
    }

    #[test]
    fn openmetrics_when_asked_for() {
        assert_eq!(
            negotiate(&["application/openmetrics-text"]),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(&["Application/OpenMetrics-Text; version=1.0.0; charset=utf-8"]),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate(&["application/*", "text/plain;q=0.5"]),
            Format::OpenMetrics
        );
        // Another version of OpenMetrics is not this one.
        assert_eq!(
            negotiate(&["application/openmetrics-text;version=0.0.1"]),
            Format::Prometheus
        );
    }

    #[test]
    fn q_values_decide() {
        // Prometheus 2's scraper.
        assert_eq!(
            negotiate(&[
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            ]),
            Format::OpenMetrics
        );
        // Prometheus 3's, which also offers text/plain 1.0.0.
        assert_eq!(
            negotiate(&[
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,\
                 application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;\
                 escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            ]),
            Format::OpenMetrics
        );
        // A scraper configured for the text format first.
        assert_eq!(
            negotiate(&[
                "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.8"
            ]),
            Format::Prometheus
        );
        // The most specific range wins: OpenMetrics refused outright.
        assert_eq!(
            negotiate(&["application/openmetrics-text;q=0", "*/*"]),
            Format::Prometheus
        );
        assert_eq!(
            negotiate(&["text/plain;q=0, */*;q=0.1"]),
            Format::OpenMetrics
        );
        // A tie, or an unreadable q-value, leaves the default.
        assert_eq!(
            negotiate(&["text/plain;q=0.5, application/openmetrics-text;q=0.5"]),
            Format::Prometheus
        );
        assert_eq!(
            negotiate(&["application/openmetrics-text;q=high"]),
            Format::Prometheus
        );
    }
}
