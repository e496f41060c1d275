//! `GET /metrics`: the dispatcher's counters and the queue depth, encoded
//! by `prometheus-client` from a snapshot taken per scrape, in the
//! Prometheus text format 0.0.4 or OpenMetrics 1.0.0 ([`Format`], chosen by
//! the request's `Accept` header), and the list of names it exposes
//! ([`exposed_names`], which the docs check reads). Nothing here carries a
//! URI, key, host or SQL.

mod format;

pub use format::Format;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use webhook_core::adoption::AdoptionTotals;
use webhook_core::hold::{Reading, Sight, Source};
use webhook_core::{HistogramSnapshot, MetricsSnapshot, QueueStats};
use webhook_store_mysql::PhpDeliveryTasks;

use crate::handoff::HandOffStatus;
use crate::history::HistoryFigures;

/// What one scrape reports.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The dispatcher's counters.
    pub dispatcher: MetricsSnapshot,
    /// Row counts, when the database answered.
    pub queue: Option<QueueStats>,
    /// The hand-off checks, where the daemon runs them.
    pub handoff: Option<HandOffStatus>,
    /// Candidate rows the store skipped as unreadable, where it counts them.
    pub rows_unreadable: Option<u64>,
    /// Task adoption's totals, where it is on.
    pub adoption: Option<AdoptionTotals>,
    /// Log lines dropped while the log output was full, where it counts
    /// them.
    pub log_lines_dropped: Option<u64>,
    /// The database server's time minus this host's, in seconds, once
    /// measured.
    pub clock_skew_secs: Option<f64>,
    /// How long the due row waiting longest has waited, in seconds (0:
    /// none is due), when the database answered.
    pub oldest_due_secs: Option<u64>,
    /// The effective claim lease, in seconds, where a dispatcher runs.
    pub claim_lease_secs: Option<u64>,
    /// The binary-log wake-up's state, where it is on.
    pub binlog_wake: Option<BinlogWake>,
    /// The attempt history's figures, where it is on.
    pub history: Option<HistoryFigures>,
}

/// Whether the binary log is followed for new rows, and what it told.
#[derive(Debug, Clone, Copy, Default)]
pub struct BinlogWake {
    /// Followed now (otherwise the wake-up probe does the work).
    pub following: bool,
    /// Inserts into the request table read from it since the start.
    pub hints: u64,
}

#[derive(Debug)]
struct ScrapeCollector {
    scrape: Scrape,
    format: Format,
}

type Labels = Vec<(&'static str, &'static str)>;

/// A counter family `name`, its samples `name_total`. OpenMetrics names the
/// family without the suffix; the Prometheus text format names it as its
/// samples are named, so there the family is declared under `name_total`
/// and each sample written under that name as it stands (the encoder's
/// counter path would add the suffix a second time).
fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    format: Format,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let family = match format {
        Format::OpenMetrics => name.to_owned(),
        Format::Prometheus => format!("{name}_total"),
    };
    let mut metric = encoder.encode_descriptor(&family, help, None, MetricType::Counter)?;
    let sample = |metric: MetricEncoder<'_>, value: u64| match format {
        Format::OpenMetrics => ConstCounter::new(value).encode(metric),
        Format::Prometheus => ConstGauge::new(value).encode(metric),
    };
    if let [(labels, value)] = series {
        if labels.is_empty() {
            return sample(metric, *value);
        }
    }
    for (labels, value) in series {
        sample(metric.encode_family(labels)?, *value)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    series: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    if let [(labels, value)] = series {
        if labels.is_empty() {
            return ConstGauge::new(*value).encode(metric);
        }
    }
    for (labels, value) in series {
        ConstGauge::new(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let d = &self.scrape.dispatcher;
        let format = self.format;
        let none = Labels::new;
        counter(
            &mut encoder,
            format,
            "gorge_webhook_deliveries",
            "Delivery attempts by outcome",
            &[
                (vec![("outcome", "ok")], d.delivered_ok),
                (vec![("outcome", "http_error")], d.delivered_http_error),
                (vec![("outcome", "timeout")], d.delivered_timeout),
                (
                    vec![("outcome", "transport_error")],
                    d.delivered_transport_error,
                ),
            ],
        )?;
        counter(
            &mut encoder,
            format,
            "gorge_webhook_hook_errors",
            "Rows failed for hook configuration, without an attempt",
            &[(none(), d.hook_errors)],
        )?;
        counter(
            &mut encoder,
            format,
            "gorge_webhook_object_checks",
            "Checks of a request's object before its call, by result: found (its transactions as \
             loaded, newest first), gone (hook error object), unseen (tables not readable: the \
             stored transactions in the order their shape implies)",
            &[
                (vec![("result", "found")], d.objects_found),
                (vec![("result", "gone")], d.objects_gone),
                (vec![("result", "unseen")], d.objects_unseen),
            ],
        )?;
        counter(
            &mut encoder,
            format,
            "gorge_webhook_claims",
            "Claims by result; lost claims sent nothing",
            &[
                (vec![("result", "won")], d.claims_won),
                (vec![("result", "lost")], d.claims_lost),
            ],
        )?;
        let simple = [
            (
                "gorge_webhook_breaker_skips",
                "Hook runs skipped because the breaker was open",
                d.breaker_skips,
            ),
            (
                "gorge_webhook_retry_after_pauses",
                "Hook pauses started by a 429 or 503 with Retry-After (none of the hook's rows is sent until it ends)",
                d.retry_after_pauses,
            ),
            (
                "gorge_webhook_lock_busy",
                "Hook runs skipped because another deliverer held the hook",
                d.lock_busy,
            ),
            (
                "gorge_webhook_claims_unused",
                "Won claims of rows claimed along with an earlier row but not sent (retried after their lease)",
                d.claims_unused,
            ),
            ("gorge_webhook_polls", "Candidate queries run", d.polls),
            (
                "gorge_webhook_wake_probes",
                "Wake-up probes read between polls (the request table's highest id)",
                d.wake_probes,
            ),
            (
                "gorge_webhook_wakeups",
                "Probes that found a new highest id and brought the poll forward",
                d.wakeups,
            ),
            (
                "gorge_webhook_poll_errors",
                "Candidate queries that failed",
                d.poll_errors,
            ),
            (
                "gorge_webhook_store_errors",
                "Other database operations that failed",
                d.store_errors,
            ),
            (
                "gorge_webhook_store_denied",
                "Of those, the ones the database refused because its account lacks a privilege",
                d.store_denied,
            ),
            (
                "gorge_webhook_writeback_retries",
                "Result write-backs that needed another try",
                d.writeback_retries,
            ),
            (
                "gorge_webhook_writeback_failures",
                "Results that could not be stored (the row is sent again after its lease)",
                d.writeback_failures,
            ),
            (
                "gorge_webhook_writeback_stale",
                "Results dropped unwritten because another deliverer claimed the row after this claim's lease",
                d.writeback_stale,
            ),
            (
                "gorge_webhook_lock_lost",
                "Hook runs stopped because the hook lock's database session was lost before a call",
                d.lock_lost,
            ),
            (
                "gorge_webhook_local_failures",
                "Calls this side could not make (out of file descriptors or memory, or the egress proxy failed them); nothing written, retried after the lease",
                d.local_failures,
            ),
        ];
        for (name, help, value) in simple {
            counter(&mut encoder, format, name, help, &[(none(), value)])?;
        }
        let proxy_failures: Vec<(Labels, u64)> = d
            .proxy_failures
            .iter()
            .map(|(why, count)| (vec![("reason", why.as_str())], *count))
            .collect();
        counter(
            &mut encoder,
            format,
            "gorge_webhook_proxy_failures",
            "Calls the egress proxy failed, by reason (counted in local_failures too: nothing written, \
             the hook's breaker untouched, retried after the lease)",
            &proxy_failures,
        )?;
        if let Some(skipped) = self.scrape.rows_unreadable {
            counter(
                &mut encoder,
                format,
                "gorge_webhook_rows_unreadable",
                "Candidate rows skipped because they could not be read (wider than the \
                 connection's max_allowed_packet), once per poll that met one; they stay queued",
                &[(none(), skipped)],
            )?;
        }
        if let Some(adoption) = self.scrape.adoption {
            adoption_counters(&mut encoder, format, adoption)?;
        }
        if let Some(dropped) = self.scrape.log_lines_dropped {
            counter(
                &mut encoder,
                format,
                "gorge_webhook_log_lines_dropped",
                "Log lines dropped because the log output did not keep up (its buffer was \
                 full); delivery is never held for the log",
                &[(none(), dropped)],
            )?;
        }
        gauge(
            &mut encoder,
            "gorge_webhook_in_flight",
            "Deliveries in flight",
            &[(none(), signed(d.in_flight))],
        )?;
        gauge(
            &mut encoder,
            "gorge_webhook_breaker_open_hooks",
            "Hooks whose breaker this instance last saw open",
            &[(none(), signed(d.breaker_open_hooks))],
        )?;
        gauge(
            &mut encoder,
            "gorge_webhook_paused_hooks",
            "Hooks this instance has paused now because their receiver sent Retry-After",
            &[(none(), signed(d.paused_hooks))],
        )?;
        gauge(
            &mut encoder,
            "gorge_webhook_delivery_refused",
            "Delivery's database operations (poll, claim, write-back, hook lookup, …) the \
             database refuses now for a privilege its account lacks or its login, each until \
             it succeeds again; /readyz answers 503 while above 0",
            &[(none(), signed(d.delivery_refused))],
        )?;
        gauge(
            &mut encoder,
            "gorge_webhook_database_up",
            "1 when the last scrape could read the queue",
            &[(none(), i64::from(self.scrape.queue.is_some()))],
        )?;
        if let Some(q) = &self.scrape.queue {
            gauge(
                &mut encoder,
                "gorge_webhook_queue_rows",
                "Rows of herald_webhookrequest by status",
                &[
                    (vec![("status", "queued")], signed(q.queued)),
                    (vec![("status", "sent")], signed(q.sent)),
                    (vec![("status", "failed")], signed(q.failed)),
                ],
            )?;
        }
        if let Some(handoff) = &self.scrape.handoff {
            encode_handoff(&mut encoder, handoff)?;
        }
        if let Some(skew) = self.scrape.clock_skew_secs {
            let metric = encoder.encode_descriptor(
                "gorge_webhook_clock_skew_seconds",
                "The database server's clock minus this host's at the last measurement (positive: \
                 this host is behind); delivery runs on the server's",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(skew).encode(metric)?;
        }
        if let Some(lag) = self.scrape.oldest_due_secs {
            gauge(
                &mut encoder,
                "gorge_webhook_oldest_due_seconds",
                "How long the due row that has waited longest has waited (queued, past its lease \
                 and retry spacing, its hook not held back by a breaker or Retry-After pause, \
                 delivery not held for silent mode); 0 when none is due",
                &[(none(), signed(lag))],
            )?;
        }
        if let Some(wake) = self.scrape.binlog_wake {
            gauge(
                &mut encoder,
                "gorge_webhook_binlog_following",
                "1 while the server's binary log is followed for new rows (GORGE_WEBHOOK_WAKE_BINLOG); \
                 0 while it cannot be and the wake-up probe notices them instead",
                &[(none(), i64::from(wake.following))],
            )?;
            counter(
                &mut encoder,
                format,
                "gorge_webhook_binlog_hints",
                "Inserts into the request table read from the binary log, each asking for a poll",
                &[(none(), wake.hints)],
            )?;
        }
        if let Some(history) = self.scrape.history {
            history_metrics(&mut encoder, format, history)?;
        }
        if let Some(lease) = self.scrape.claim_lease_secs {
            gauge(
                &mut encoder,
                "gorge_webhook_claim_lease_seconds",
                "The effective claim lease: how long a claimed row is kept from other deliverers \
                 (the stall alert compares the oldest due row's wait with two of it)",
                &[(none(), signed(lease))],
            )?;
        }
        histogram(
            &mut encoder,
            "gorge_webhook_queue_time_seconds",
            "Time from a request's creation (Phorge's whole-second dateCreated) to its first attempt",
            &d.queue_time,
        )?;
        histogram(
            &mut encoder,
            "gorge_webhook_delivery_duration_seconds",
            "Time from request start to the receiver's final answer",
            &d.latency,
        )
    }
}

fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    h: &HistogramSnapshot,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    metric.encode_histogram::<Vec<(&str, &str)>>(
        h.sum_micros as f64 / 1e6,
        h.count,
        &per_bucket(h),
        None,
    )
}

fn encode_handoff(
    encoder: &mut DescriptorEncoder<'_>,
    status: &HandOffStatus,
) -> Result<(), std::fmt::Error> {
    let none = Labels::new;
    gauge(
        encoder,
        "gorge_webhook_silent_mode",
        "1 while Phorge is in global silent mode and delivery is held",
        &[(none(), i64::from(status.silent_mode.held()))],
    )?;
    let visible = |source: Source| {
        (
            vec![("source", source.label())],
            i64::from(status.silent_mode.reading(source).is_visible()),
        )
    };
    gauge(
        encoder,
        "gorge_webhook_silent_mode_visible",
        "1 when this source of phabricator.silent was read at the last check: local_config \
         (GORGE_PHORGE_LOCAL_CONFIG, where bin/config set keeps it) or database (config_entry)",
        &[visible(Source::LocalConfig), visible(Source::Database)],
    )?;
    if let Some(tasks) = status.php_tasks {
        gauge(
            encoder,
            "gorge_webhook_php_delivery_tasks",
            "HeraldWebhookWorker tasks in Phorge's queue: queued (a PHP taskmaster could run \
             them now) and leased (on PHP's side) above 0 mean PHP delivers too; adopted (leased \
             by a daemon, GORGE_WEBHOOK_ADOPT_PHP_TASKS) cannot run in phd",
            &[
                (vec![("state", "queued")], signed(tasks.queued)),
                (vec![("state", "leased")], signed(tasks.leased)),
                (vec![("state", "adopted")], signed(tasks.adopted)),
            ],
        )?;
    }
    Ok(())
}

/// Task adoption's counters (GORGE_WEBHOOK_ADOPT_PHP_TASKS).
fn adoption_counters(
    encoder: &mut DescriptorEncoder<'_>,
    format: Format,
    totals: AdoptionTotals,
) -> Result<(), std::fmt::Error> {
    let none = Labels::new;
    counter(
        encoder,
        format,
        "gorge_webhook_php_tasks_adopted",
        "HeraldWebhookWorker tasks leased from Phorge's queue so phd does not run them",
        &[(none(), totals.adopted)],
    )?;
    counter(
        encoder,
        format,
        "gorge_webhook_php_tasks_archived",
        "Adopted tasks archived once their request ended, by the result Phorge's worker \
         would record",
        &[
            (vec![("result", "success")], totals.archived_success),
            (vec![("result", "failure")], totals.archived_failure),
        ],
    )?;
    counter(
        encoder,
        format,
        "gorge_webhook_rows_waiting_for_php",
        "Candidate rows left alone because a PHP taskmaster holds their task, once per poll \
         that met one",
        &[(none(), totals.rows_waiting_for_php)],
    )?;
    counter(
        encoder,
        format,
        "gorge_webhook_php_tasks_lost",
        "Webhook tasks a phd taskmaster leased before this daemon, by outcome: yielded \
         (the hook's lock was held; adopted since), left_to_php (its request left to PHP)",
        &[
            (vec![("outcome", "yielded")], totals.lost.yielded),
            (vec![("outcome", "left_to_php")], totals.lost.left_to_php),
        ],
    )
}

/// The core keeps cumulative bucket counts; the encoder wants each bucket's
/// own count, with `+Inf` last.
fn per_bucket(h: &HistogramSnapshot) -> Vec<(f64, u64)> {
    let mut out = Vec::with_capacity(h.bounds.len() + 1);
    let mut below = 0;
    for (bound, cumulative) in h.bounds.iter().zip(&h.buckets) {
        out.push((*bound, cumulative.saturating_sub(below)));
        below = *cumulative;
    }
    out.push((f64::MAX, h.count.saturating_sub(below)));
    out
}

/// Encodes one scrape in `format`.
pub fn render(scrape: Scrape, format: Format) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ScrapeCollector { scrape, format }));
    let mut out = String::new();
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
        // The same lines without OpenMetrics' `# EOF`.
        Format::Prometheus => {
            prometheus_client::encoding::text::encode_registry(&mut out, &registry)?
        }
    }
    Ok(out)
}

/// The attempt history's counter and gauges.
fn history_metrics(
    encoder: &mut DescriptorEncoder<'_>,
    format: Format,
    history: HistoryFigures,
) -> std::fmt::Result {
    let totals = history.totals;
    counter(
        encoder,
        format,
        "gorge_webhook_history_attempts",
        "Attempts handed to the attempt history (recorded), stored (written), and dropped \
         because the history could not keep them (a failed write, a full queue); delivery \
         never waits for them",
        &[
            (vec![("result", "recorded")], totals.recorded),
            (vec![("result", "written")], totals.written),
            (vec![("result", "dropped")], totals.dropped),
        ],
    )?;
    if let Some(rows) = history.rows_kept {
        gauge(
            encoder,
            "gorge_webhook_history_rows",
            "Attempts kept in the attempt history, as of the last retention pass",
            &[(Labels::new(), signed(rows))],
        )?;
    }
    if let Some(age) = history.oldest_age_secs {
        gauge(
            encoder,
            "gorge_webhook_history_oldest_seconds",
            "Age of the oldest attempt kept in the attempt history, as of the last retention pass",
            &[(Labels::new(), signed(age))],
        )?;
    }
    Ok(())
}

/// A scrape with every part present: the queue, the hand-off, the
/// unreadable-row count, task adoption, the dropped log lines, the clock's
/// skew, the attempt history.
fn every_part() -> Scrape {
    Scrape {
        dispatcher: MetricsSnapshot::default(),
        queue: Some(QueueStats::default()),
        handoff: Some(HandOffStatus {
            silent_mode: Sight {
                local_config: Reading::NotSet,
                database: Reading::Off,
            },
            php_tasks: Some(PhpDeliveryTasks::default()),
            adopting: false,
        }),
        rows_unreadable: Some(0),
        adoption: Some(AdoptionTotals::default()),
        log_lines_dropped: Some(0),
        clock_skew_secs: Some(0.0),
        oldest_due_secs: Some(0),
        claim_lease_secs: Some(30),
        binlog_wake: Some(BinlogWake::default()),
        history: Some(HistoryFigures {
            rows_kept: Some(0),
            oldest_age_secs: Some(0),
            ..HistoryFigures::default()
        }),
    }
}

/// Every name `/metrics` can expose: each family as OpenMetrics' `# TYPE`
/// line names it, and each sample's name (a counter's `_total`, under
/// which the Prometheus text format declares its family; a histogram's
/// `_bucket`, `_sum` and `_count`), read from a scrape with every part
/// present.
pub fn exposed_names() -> Vec<String> {
    // Encoding into a String cannot fail; an empty list fails its users.
    let text = render(every_part(), Format::OpenMetrics).unwrap_or_default();
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(family) => family.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        })
        .map(str::to_owned)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use webhook_core::{LATENCY_BUCKETS, QUEUE_TIME_BUCKETS};

    fn quiet() -> Scrape {
        Scrape {
            dispatcher: MetricsSnapshot::default(),
            queue: None,
            handoff: None,
            rows_unreadable: None,
            adoption: None,
            log_lines_dropped: None,
            clock_skew_secs: None,
            oldest_due_secs: None,
            claim_lease_secs: None,
            binlog_wake: None,
            history: None,
        }
    }

    #[test]
    fn renders_counters_queue_and_histogram() {
        let dispatcher = MetricsSnapshot {
            delivered_ok: 5,
            claims_lost: 2,
            latency: HistogramSnapshot {
                buckets: vec![1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
                count: 3,
                sum_micros: 40_000_000,
                ..HistogramSnapshot::empty(LATENCY_BUCKETS)
            },
            queue_time: HistogramSnapshot {
                buckets: vec![2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3],
                count: 3,
                sum_micros: 61_000_000,
                ..HistogramSnapshot::empty(QUEUE_TIME_BUCKETS)
            },
            ..MetricsSnapshot::default()
        };
        let scrape = Scrape {
            dispatcher,
            queue: Some(QueueStats {
                queued: 7,
                sent: 1,
                failed: 0,
                active_hooks: 2,
            }),
            rows_unreadable: Some(4),
            log_lines_dropped: Some(9),
            clock_skew_secs: Some(-3_600.25),
            oldest_due_secs: Some(75),
            claim_lease_secs: Some(30),
            binlog_wake: Some(BinlogWake {
                following: true,
                hints: 12,
            }),
            ..quiet()
        };
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = render(scrape.clone(), format).expect("encodes");
            for line in [
                "gorge_webhook_clock_skew_seconds -3600.25",
                "gorge_webhook_rows_unreadable_total 4",
                "gorge_webhook_log_lines_dropped_total 9",
                "gorge_webhook_deliveries_total{outcome=\"ok\"} 5",
                "gorge_webhook_claims_total{result=\"lost\"} 2",
                "gorge_webhook_queue_rows{status=\"queued\"} 7",
                "gorge_webhook_database_up 1",
                "gorge_webhook_delivery_duration_seconds_bucket{le=\"0.005\"} 1",
                "gorge_webhook_delivery_duration_seconds_bucket{le=\"0.01\"} 2",
                "gorge_webhook_delivery_duration_seconds_bucket{le=\"+Inf\"} 3",
                "gorge_webhook_delivery_duration_seconds_count 3",
                "gorge_webhook_queue_time_seconds_bucket{le=\"1.0\"} 2",
                "gorge_webhook_queue_time_seconds_bucket{le=\"60.0\"} 3",
                "gorge_webhook_queue_time_seconds_sum 61.0",
                "gorge_webhook_oldest_due_seconds 75",
                "gorge_webhook_claim_lease_seconds 30",
                "gorge_webhook_binlog_following 1",
                "gorge_webhook_binlog_hints_total 12",
            ] {
                assert!(
                    text.lines().any(|l| l == line),
                    "{format:?}: {line}\n{text}"
                );
            }
            assert_eq!(
                text.ends_with("\n# EOF\n"),
                format == Format::OpenMetrics,
                "{text}"
            );
        }
    }

    /// The `# HELP` and `# TYPE` lines of `text`: (family, help, type).
    fn descriptors(text: &str) -> Vec<(String, String, String)> {
        let mut found = Vec::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let Some(help) = line.strip_prefix("# HELP ") else {
                continue;
            };
            let (family, help) = help.split_once(' ').expect("a HELP line has a text");
            let kind = lines
                .next()
                .and_then(|l| l.strip_prefix(&format!("# TYPE {family} ")))
                .unwrap_or_else(|| panic!("no TYPE line right after HELP {family}"));
            found.push((family.to_owned(), help.to_owned(), kind.to_owned()));
        }
        found
    }

    #[test]
    fn the_prometheus_text_format_names_a_counter_family_as_its_samples() {
        let prometheus = render(every_part(), Format::Prometheus).expect("encodes");
        let openmetrics = render(every_part(), Format::OpenMetrics).expect("encodes");
        let samples = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        assert_eq!(samples(&prometheus), samples(&openmetrics));
        assert!(!prometheus.contains("# EOF"), "{prometheus}");
        assert!(!prometheus.contains("# UNIT"), "{prometheus}");

        let in_prometheus = descriptors(&prometheus);
        let as_openmetrics_spells_them: Vec<_> = descriptors(&openmetrics)
            .into_iter()
            .map(|(family, help, kind)| match kind.as_str() {
                "counter" => (format!("{family}_total"), help, kind),
                _ => (family, help, kind),
            })
            .collect();
        assert_eq!(in_prometheus, as_openmetrics_spells_them);
        let counters: Vec<&str> = in_prometheus
            .iter()
            .filter(|(_, _, kind)| kind == "counter")
            .map(|(family, _, _)| family.as_str())
            .collect();
        assert!(counters.len() >= 17, "{counters:?}");
        for family in counters {
            assert!(family.ends_with("_total"), "{family}");
            assert!(
                samples(&prometheus)
                    .iter()
                    .any(|s| s.starts_with(&format!("{family} "))
                        || s.starts_with(&format!("{family}{{"))),
                "{family} has no sample of its own name"
            );
        }
    }

    #[test]
    fn a_database_outage_is_a_gauge_not_an_error() {
        let text = render(quiet(), Format::Prometheus).expect("encodes");
        assert!(text.contains("gorge_webhook_database_up 0"), "{text}");
        assert!(text.contains("gorge_webhook_polls_total 0"), "{text}");
        assert!(!text.contains("queue_rows{"));
        assert!(!text.contains("clock_skew"), "not measured yet: {text}");
    }

    fn handoff_lines(local_config: Reading, database: Reading) -> Vec<String> {
        let scrape = Scrape {
            handoff: Some(HandOffStatus {
                silent_mode: Sight {
                    local_config,
                    database,
                },
                php_tasks: None,
                adopting: false,
            }),
            ..quiet()
        };
        let text = render(scrape, Format::Prometheus).expect("encodes");
        text.lines()
            .filter(|l| l.starts_with("gorge_webhook_silent_mode"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn silent_mode_visibility_is_shown_per_source() {
        assert_eq!(
            handoff_lines(Reading::NotSet, Reading::Off),
            [
                "gorge_webhook_silent_mode 0",
                "gorge_webhook_silent_mode_visible{source=\"local_config\"} 0",
                "gorge_webhook_silent_mode_visible{source=\"database\"} 1",
            ],
            "the database alone is not where Phorge keeps the key"
        );
        assert_eq!(
            handoff_lines(Reading::On, Reading::Unreadable),
            [
                "gorge_webhook_silent_mode 1",
                "gorge_webhook_silent_mode_visible{source=\"local_config\"} 1",
                "gorge_webhook_silent_mode_visible{source=\"database\"} 0",
            ]
        );
    }

    #[test]
    fn exposed_names_hold_every_family_and_sample_name() {
        let names = exposed_names();
        for family in [
            "gorge_webhook_deliveries",
            "gorge_webhook_deliveries_total",
            "gorge_webhook_rows_unreadable_total",
            "gorge_webhook_log_lines_dropped_total",
            "gorge_webhook_queue_rows",
            "gorge_webhook_silent_mode_visible",
            "gorge_webhook_php_delivery_tasks",
            "gorge_webhook_clock_skew_seconds",
            "gorge_webhook_delivery_duration_seconds",
            "gorge_webhook_delivery_duration_seconds_bucket",
            "gorge_webhook_delivery_duration_seconds_sum",
            "gorge_webhook_delivery_duration_seconds_count",
        ] {
            assert!(names.iter().any(|n| n == family), "{family}: {names:?}");
        }
        assert!(
            names.iter().all(|n| n.starts_with("gorge_webhook_")),
            "{names:?}"
        );
    }
}
