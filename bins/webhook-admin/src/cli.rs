//! The command line: subcommands, their arguments and their `--help`
//! texts. Parsing only; what each command does lives in its own module.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::EXIT_STATUS_HELP;

/// The environment note every read-only database-backed command's help
/// carries.
const ENVIRONMENT_HELP: &str = "\
Reads the daemon's GORGE_* environment (GORGE_WEBHOOK_MYSQL_HOST/_PORT/_USER/
_PASS, GORGE_WEBHOOK_NAMESPACE, the window settings, ...) and validates it as
the daemon does. This command only ever SELECTs: it never writes, claims or
locks a row (requeue --apply is the one command that writes).";

/// `requeue`'s own note: the one command that writes.
const REQUEUE_HELP: &str = "\
This is the only webhook-admin command that writes, and only with --apply.

Selects final failures (status failed). ID|PHID is a row id (42) or a request
PHID (PHID-HWBR-...); with none named, every failed row is considered. The
filters AND together, and at least one selector is required. --since and
--until match the last attempt's time (lastRequestEpoch), so they never match
a row that was never attempted (hook errors: disabled, uri, not-found, ...).
TIME is Unix seconds (1764666000), an RFC 3339 UTC timestamp
(2026-12-02T09:00:00Z) or HH:MM (today, UTC). --error TYPE[/CODE] matches the
recorded errorType and errorCode: http, http/500, http/5xx, timeout/28,
hook/disabled.

Without --apply it lists the rows it would requeue and writes nothing. With
--apply each row is set to status queued, lastRequestResult none,
lastRequestEpoch now and a new dateModified, by one compare-and-set UPDATE on
the state it was read in: a row that changed meanwhile (a daemon, Phorge or
another operator) is left alone and counted. properties are not changed. A
requeued row waits one claim lease, then the daemons deliver it by the normal
protocol. Exit status 0 when the selection ran, even if some rows changed
meanwhile; 1 when a named row does not exist (nothing is written then).

Reads the daemon's GORGE_* environment (GORGE_WEBHOOK_MYSQL_HOST/_PORT/_USER/
_PASS, GORGE_WEBHOOK_NAMESPACE, ...) and validates it as the daemon does.";

/// `history`'s own note.
const HISTORY_HELP: &str = "\
Reads the daemon's attempt history (GORGE_WEBHOOK_HISTORY=on), a database of
its own (GORGE_WEBHOOK_HISTORY_DATABASE, by default {namespace}_webhook_history),
never Phorge's table: a request Phorge has already deleted is still listed.
The filters AND together. TIME is Unix seconds (1764666000), an RFC 3339 UTC
timestamp (2026-12-02T09:00:00Z), HH:MM (today, UTC) or an age before now
(45s, 30m, 2h, 7d). --json prints one JSON array of the attempts with the
history's field names (id, number, instance, request_id, request_phid,
hook_phid, object_phid, claim_version, started_ms, duration_ms, status,
error_type, error_code, http_status, sent, exchange). Exit status 3 when the
history database does not exist (the history is off or never ran).";

/// Operator's tool for the gorge-webhook daemon: inspect settings and the
/// queue, explain why a request is (not) being delivered, test receivers
/// and signatures, and requeue failed requests. Every command only reads,
/// except `requeue --apply`, the one command that writes.
#[derive(Debug, Parser)]
#[command(name = "webhook-admin", version, after_help = EXIT_STATUS_HELP)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--json` for commands that have a script-friendly form.
#[derive(Debug, Clone, Copy, Args)]
pub struct Output {
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show every effective setting, where it came from, and warnings about
    /// settings that do not do what they seem to.
    #[command(after_help = format!(
        "Reads the GORGE_* environment only; needs no database.\n\n{EXIT_STATUS_HELP}"
    ))]
    Config(Output),

    /// The hand-off checks: database and schema, Phorge's global silent
    /// mode (in its conf/local/local.json and its database configuration),
    /// and PHP delivery tasks still in Phorge's task queue — each with what
    /// to do.
    #[command(after_help = format!(
        "Silent mode is read from the file GORGE_PHORGE_LOCAL_CONFIG names, as the daemon \
         reads it, and from {{namespace}}_config.config_entry.\n\n\
         Exit status 1 when PHP still delivers webhooks (receivers get requests twice) \
         or the schema is unusable.\n\n{ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}"
    ))]
    Doctor(Output),

    /// Queue counts, as GET /api/webhook/stats reports them:
    /// {"data":{"queuedCount","sentCount","failedCount","activeWebhooks"}}.
    #[command(after_help = format!("{ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}"))]
    Stats(Output),

    /// Every hook: name, PHID, status, queued and failed rows, whether its
    /// breaker is open now, and what the daemon knows of it (a Retry-After
    /// pause, a key grace). URIs only with --show-uri; keys never.
    #[command(after_help = format!(
        "The DAEMON column comes from the daemon's memory, not the database: a pause after \
         its receiver answered 429 or 503 with Retry-After, and a key grace (the hook's HMAC \
         key changed and the previous key signs too until GORGE_WEBHOOK_KEY_GRACE_SEC has \
         passed). hooks asks the daemon (GET /api/webhook/hooks/state at --url, else 127.0.0.1 at \
         GORGE_LISTEN_ADDR's port, with GORGE_SERVICE_TOKEN); when it cannot, it says so in \
         one note.\n\n{ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}"
    ))]
    Hooks {
        /// Script-friendly output.
        #[command(flatten)]
        output: Output,
        /// Also show each hook's URI (it may contain credentials).
        #[arg(long)]
        show_uri: bool,
        /// The daemon's diagnostics address, asked for its pauses and key
        /// graces (e.g. http://127.0.0.1:8160).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },

    /// Why this request is or is not being delivered right now, by the
    /// daemon's own rules, with the payload and signature it would send.
    #[command(after_help = format!(
        "REQUEST is a row id (42) or a request PHID (PHID-HWBR-...).\n\n\
         Verdicts: sent, failed (final); eligible; held (Phorge is in silent mode); \
         in-lease, retry-backoff, paused, breaker-open (waiting, with the time it ends); \
         refused, object-gone, silenced, hook-disabled, hook-missing, properties-unparseable, \
         invalid-row (the daemon will fail the row); resolve-failed (the daemon will record a \
         failed attempt). Exit status 0 whatever the verdict.\n\n\
         The daemon's checks are made with its own code and this tool's settings: silent \
         mode from Phorge's local.json (GORGE_PHORGE_LOCAL_CONFIG) and its config_entry \
         table, the outbound check of the hook's URI (GORGE_WEBHOOK_OUTBOUND_DENY and \
         GORGE_WEBHOOK_OUTBOUND_ALLOW; the host is resolved here, never connected to), the \
         object check.\n\n\
         paused comes from the daemon, not the database: its receiver answered 429 or 503 \
         with Retry-After. For a queued row explain asks the daemon (GET /api/webhook/hooks/state \
         at --url, else 127.0.0.1 at GORGE_LISTEN_ADDR's port, with GORGE_SERVICE_TOKEN); \
         when it cannot, it says so in one note and judges from the database alone.\n\n\
         {ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}"
    ))]
    Explain {
        /// Row id or request PHID.
        request: String,
        /// Script-friendly output.
        #[command(flatten)]
        output: Output,
        /// Judge as of this Unix time instead of the database server's now,
        /// which the daemon judges by (e.g. "will it be eligible at
        /// 1700000100?").
        #[arg(long, value_name = "UNIX_SECONDS")]
        at: Option<u64>,
        /// The daemon's diagnostics address, asked for its Retry-After
        /// pauses (e.g. http://127.0.0.1:8160).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },

    /// Every attempt the daemon recorded in its attempt history, newest
    /// first: when, which request, its outcome, the HTTP status, each
    /// redirect hop, what was sent and what came back.
    #[command(after_help = format!("{HISTORY_HELP}\n\n{ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}"))]
    History {
        /// Which attempts.
        #[command(flatten)]
        filters: HistoryFilters,
        /// Also show the request and response headers, the whole kept
        /// response body, the claim version and the history's attempt id.
        #[arg(long, short)]
        verbose: bool,
        /// Script-friendly output: one JSON array of the attempts.
        #[command(flatten)]
        output: Output,
    },

    /// Put failed requests back in the queue (dry run unless --apply): the
    /// only command that writes.
    #[command(after_help = format!("{REQUEUE_HELP}\n\n{EXIT_STATUS_HELP}"))]
    Requeue {
        /// Row ids or request PHIDs; none = every failed row the filters
        /// select.
        #[arg(value_name = "ID|PHID")]
        requests: Vec<String>,
        /// Only requests of this hook.
        #[arg(long, value_name = "PHID")]
        hook: Option<String>,
        /// Only rows whose last attempt was at or after TIME.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Only rows whose last attempt was at or before TIME.
        #[arg(long, value_name = "TIME")]
        until: Option<String>,
        /// Only rows with this recorded error: TYPE or TYPE/CODE (http/5xx).
        #[arg(long, value_name = "TYPE[/CODE]")]
        error: Option<String>,
        /// Write: requeue the selected rows (without it, a dry run).
        #[arg(long)]
        apply: bool,
        /// Script-friendly output.
        #[command(flatten)]
        output: Output,
    },

    /// Print the exact body bytes that would be POSTed for this request,
    /// and nothing else (for diffing against what a receiver got).
    #[command(after_help = format!(
        "REQUEST is a row id (42) or a request PHID (PHID-HWBR-...).\n\n\
         {ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}"
    ))]
    Payload {
        /// Row id or request PHID.
        request: String,
    },

    /// Print the lower-case hex HMAC-SHA256 of standard input under KEY, as
    /// the X-Phabricator-Webhook-Signature header carries it.
    #[command(after_help = format!(
        "The key is the hook's 32-character HMAC key, used as raw ASCII bytes. Give it with \
         --key-file or WEBHOOK_HMAC_KEY rather than --key: command-line arguments are \
         visible to other local users.\n\n{EXIT_STATUS_HELP}"
    ))]
    Sign {
        #[command(flatten)]
        key: KeyArgs,
    },

    /// Check SIGNATURE against standard input under KEY; the exit status
    /// tells the result (0 matches, 1 does not).
    #[command(after_help = format!(
        "Comparison is constant-time; hex case is ignored.\n\n{EXIT_STATUS_HELP}"
    ))]
    Verify {
        #[command(flatten)]
        key: KeyArgs,
        /// The signature header's value (64 hex digits).
        #[arg(long)]
        signature: String,
    },

    /// A local receiver for testing hooks: prints each delivery's headers
    /// and body, checks its signature when --key is given, and answers
    /// with the chosen status after the chosen delay.
    #[command(after_help = format!(
        "Point a test hook's URI at it (the daemon's outbound deny list refuses loopback \
         unless GORGE_WEBHOOK_OUTBOUND_ALLOW opens it). Stops on Ctrl-C, or after --count \
         deliveries; the exit status is then 1 if any signature check failed.\n\n\
         {EXIT_STATUS_HELP}"
    ))]
    Listen {
        /// Address to bind; loopback by default. Port 0 picks a free one.
        #[arg(long, default_value = "127.0.0.1:8161")]
        addr: SocketAddr,
        /// Check X-Phabricator-Webhook-Signature / X-Phorge-Webhook-Signature
        /// against this HMAC key.
        #[command(flatten)]
        key: KeyArgs,
        /// HTTP status to answer with.
        #[arg(long, default_value_t = 200,
              value_parser = clap::value_parser!(u16).range(100..=599))]
        status: u16,
        /// Wait this long before answering (to try the daemon's timeout).
        #[arg(long, default_value_t = 0, value_name = "MS")]
        delay_ms: u64,
        /// Stop after this many deliveries.
        #[arg(long, value_name = "N",
              value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },

    /// Follow the daemon's live events (GET /api/webhook/events): one line
    /// per claim, delivery, failed attempt, hook error, breaker change,
    /// Retry-After pause and silent-mode hold, with a running summary per
    /// hook.
    #[command(after_help = format!(
        "Sends GORGE_SERVICE_TOKEN as X-Service-Token. Without --url it connects to \
         127.0.0.1 at GORGE_LISTEN_ADDR's port (the host too, when that names one). Colour \
         when standard output is a terminal (and NO_COLOR is unset). The summary counts \
         every event of the watched hooks, --failures-only or not; \"in backoff\" are hooks \
         whose breaker is open. Stops when the daemon ends the stream (it does on \
         shutdown), after --count events, or on Ctrl-C, and prints a final summary. Never \
         changes anything in the daemon.\n\n{EXIT_STATUS_HELP}"
    ))]
    Watch {
        /// The daemon's diagnostics address (e.g. http://127.0.0.1:8160).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
        /// Only this hook's events (and those about every hook: silent-mode
        /// holds, dropped events).
        #[arg(long, value_name = "PHID")]
        hook: Option<String>,
        /// Hide claims and deliveries: show failed attempts, hook errors,
        /// breaker changes, Retry-After pauses, silent-mode holds and
        /// dropped events.
        #[arg(long)]
        failures_only: bool,
        /// Print each event's JSON line as received (summaries as JSON too).
        #[arg(long)]
        json: bool,
        /// Stop after this many events shown.
        #[arg(long, value_name = "N",
              value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
        /// Print the summary after every N events shown; 0 = only at the end.
        #[arg(long, value_name = "N", default_value_t = 20)]
        summary_every: u64,
        /// Read a recorded stream from FILE instead of connecting.
        #[arg(long, value_name = "FILE", hide = true, conflicts_with = "url")]
        from_file: Option<PathBuf>,
    },

    /// Print a completion script for SHELL to standard output (bash: save
    /// it as /usr/share/bash-completion/completions/webhook-admin).
    #[command(after_help = EXIT_STATUS_HELP)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },

    /// Print the manual page (roff) to standard output, or with --dir
    /// write webhook-admin.1 and one page per command there.
    #[command(after_help = EXIT_STATUS_HELP)]
    Man {
        /// Where to write the pages.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// Writes the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "webhook-admin", out);
}

/// Writes the manual page to `out`, or every page into `dir`.
pub fn man(dir: Option<&std::path::Path>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    match dir {
        Some(dir) => clap_mangen::generate_to(Cli::command(), dir),
        None => clap_mangen::Man::new(Cli::command()).render(out),
    }
}

/// Where a hook's HMAC key comes from: `--key` (visible to other local
/// users in the process list), `--key-file`, or `WEBHOOK_HMAC_KEY`.
#[derive(Debug, Clone, Args)]
pub struct KeyArgs {
    /// The hook's HMAC key (or WEBHOOK_HMAC_KEY; prefer --key-file).
    #[arg(
        long,
        env = "WEBHOOK_HMAC_KEY",
        hide_env_values = true,
        conflicts_with = "key_file"
    )]
    pub key: Option<String>,
    /// A file holding the hook's HMAC key; a trailing newline is ignored.
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
}

/// `history`'s filters, as typed; `history::HistoryFilters::query` reads
/// them.
#[derive(Debug, Default, clap::Args)]
pub struct HistoryFilters {
    /// Only this request's attempts: a row id (42) or a request PHID.
    #[arg(long, value_name = "ID|PHID")]
    pub request: Option<String>,
    /// Only attempts on this hook's requests.
    #[arg(long, value_name = "PHID")]
    pub hook: Option<String>,
    /// Only attempts on this object's requests.
    #[arg(long, value_name = "PHID")]
    pub object: Option<String>,
    /// Only attempts whose status, error type or error code is TEXT
    /// (sent, failed, timeout, 503, not-found, ...).
    #[arg(long, value_name = "TEXT")]
    pub outcome: Option<String>,
    /// Only attempts started at or after TIME (or an age: 2h, 7d, 30m).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only attempts started before TIME (or an age: 2h, 7d, 30m).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Show at most N attempts.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub limit: u64,
}
