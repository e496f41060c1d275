//! The bench's options (`USAGE`, `--help`) and the daemon settings they
//! give: the variables the daemon is started with, and the windows and pool
//! size the bench reads from them the way the daemon does.

use std::net::SocketAddr;
use std::path::PathBuf;

use webhook_core::windows::{Settings, Windows};
use webhook_store_mysql::MysqlConfig;
use webhook_test_support::daemon_process::database_env;

use crate::soak;

/// What `--help` prints.
pub(crate) const USAGE: &str = "usage: cargo xtask bench [options]
  (or: cargo bench -p webhook-daemon --bench backlog -- [options])

  --rows N            queued rows in the backlog (default 10000)
  --hooks H           hooks the rows are spread over (default 100)
  --latency-ms MS     receiver answers after this long (default 0)
  --max-concurrent M  sets GORGE_WEBHOOK_MAX_CONCURRENT (default: the daemon's, 256)
  --retained R        scale check: R retained `sent` rows (default 0 = skip)
  --timed T           timed rows per latency phase (default 50)
  --busy-rate RPS     background inserts/s in the busy phase (default: 1/4 of the drain rate)
  --idle-secs S       idle sampling window (default 5; 10 with --idle-wake)
  --env NAME=VALUE    an extra GORGE_* setting for the daemon (repeatable; for
                      experiments — the baseline follows its pool size)
  --objects           give every row's task an object row in Maniphest's tables
                      (as on a real install whose account may read them), so
                      each delivery's object check reads them
  --daemon-bin PATH   run this webhook-daemon binary instead of the one cargo
                      built (e.g. an older commit's, for before/after runs)
  --history           with the attempt history on (GORGE_WEBHOOK_HISTORY=on);
                      after the run its attempts are counted against the
                      deliveries and its database dropped (default and
                      scenario modes)

  soak mode (issue 17; replaces the drain and latency phases):
  --soak-secs S       insert rows at a steady rate for S seconds over --hooks H
  --soak-rate R       rows per second, round-robin over the H hooks (default 300)
  --failing-pct P     P % of the H hooks answer 500 (default 0)
  --timeout-pct Q     Q % of the H hooks answer only after the delivery timeout
                      (default 0)
  --slow-hook-ms MS   one extra hook answering 200 after MS ms, with
  --slow-hook-rows N  N rows queued for it before the daemon starts (default 40)
  Soak rows carry retry=forever (Phorge's default for rule-triggered
  requests), so a failing hook's rows are retried for ever.

  idle wake-up mode (issue 36; replaces the default run):
  --idle-wake         --timed rows inserted one at a time 0.4-1.2 s apart into
                      idle daemons, each timed from its INSERT to the receipt;
                      before them, the statements/s each idle instance sends
                      over --idle-secs (default 10 in this mode)
  --instances N       daemons sharing the queue in this mode (default 1)
  --binlog            on a private MariaDB started for the run with its binary
                      log on (the daemon follows it for new rows), instead of
                      the local server

  scenario mode (issue 19; replaces the default run):
  --scenarios         10000 rows over 1000 hooks answering after 100 ms, once per
                      M below; then the idle poll on the stock schema (no
                      key_status) against the indexed one, with --retained rows
                      (default 1000000 in this mode)
  --scenario-m LIST   the MAX_CONCURRENT values, comma-separated; `default` is
                      the daemon's own (default \"default,512\")";

/// The parsed command line.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) rows: usize,
    pub(crate) hooks: usize,
    pub(crate) latency_ms: u64,
    pub(crate) max_concurrent: Option<usize>,
    pub(crate) retained: u64,
    pub(crate) timed: usize,
    pub(crate) busy_rate: Option<f64>,
    pub(crate) idle_secs: u64,
    pub(crate) objects: bool,
    pub(crate) extra_env: Vec<(String, String)>,
    pub(crate) daemon_bin: Option<PathBuf>,
    pub(crate) soak: Option<soak::SoakArgs>,
    /// `--scenarios`: the `MAX_CONCURRENT` values (`None` = the daemon's).
    pub(crate) scenarios: Option<Vec<Option<usize>>>,
    /// `--idle-wake`: the number of instances.
    pub(crate) idle_wake: Option<usize>,
    /// `--binlog`: the idle-wake run on a private server keeping a binary
    /// log.
    pub(crate) binlog: bool,
    /// `--history`: the attempt history on.
    pub(crate) history: bool,
}

pub(crate) fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        rows: 10_000,
        hooks: 100,
        latency_ms: 0,
        max_concurrent: None,
        retained: 0,
        timed: 50,
        busy_rate: None,
        idle_secs: 5,
        objects: false,
        extra_env: Vec::new(),
        daemon_bin: None,
        soak: None,
        scenarios: None,
        idle_wake: None,
        binlog: false,
        history: false,
    };
    let mut instances = 1;
    let mut idle_secs_given = false;
    let mut scenario_m = "default,512".to_owned();
    let mut retained_given = false;
    let mut soak = soak::SoakArgs::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // cargo bench passes this to every harness-less bench
        }
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_owned());
        }
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (flag.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))
        };
        let number = |text: String| -> Result<u64, String> {
            text.replace('_', "")
                .parse::<u64>()
                .map_err(|_| format!("{name}: {text:?} is not a whole number"))
        };
        match name.as_str() {
            "--rows" => args.rows = number(value()?)? as usize,
            "--hooks" => args.hooks = number(value()?)? as usize,
            "--latency-ms" => args.latency_ms = number(value()?)?,
            "--max-concurrent" => args.max_concurrent = Some(number(value()?)? as usize),
            "--retained" => {
                args.retained = number(value()?)?;
                retained_given = true;
            }
            "--scenarios" => args.scenarios = Some(Vec::new()),
            "--scenario-m" => scenario_m = value()?,
            "--timed" => args.timed = number(value()?)? as usize,
            "--busy-rate" => args.busy_rate = Some(number(value()?)? as f64),
            "--idle-secs" => {
                args.idle_secs = number(value()?)?;
                idle_secs_given = true;
            }
            "--idle-wake" => args.idle_wake = Some(1),
            "--instances" => instances = number(value()?)? as usize,
            "--binlog" => args.binlog = true,
            "--history" => {
                args.history = true;
                let on = ("GORGE_WEBHOOK_HISTORY".to_owned(), "on".to_owned());
                args.extra_env.push(on);
            }
            "--objects" => args.objects = true,
            "--daemon-bin" => args.daemon_bin = Some(PathBuf::from(value()?)),
            "--soak-secs" => soak.secs = number(value()?)?,
            "--soak-rate" => soak.rate = number(value()?)? as f64,
            "--failing-pct" => soak.failing_pct = number(value()?)?,
            "--timeout-pct" => soak.timeout_pct = number(value()?)?,
            "--slow-hook-ms" => soak.slow_hook_ms = Some(number(value()?)?),
            "--slow-hook-rows" => soak.slow_hook_rows = number(value()?)? as usize,
            "--env" => {
                let pair = value()?;
                match pair.split_once('=') {
                    Some((k, v)) if k.starts_with("GORGE_") => {
                        args.extra_env.push((k.to_owned(), v.to_owned()));
                    }
                    _ => return Err(format!("--env: {pair:?} is not GORGE_NAME=VALUE")),
                }
            }
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    if args.rows == 0 || args.hooks == 0 || args.max_concurrent == Some(0) {
        return Err("--rows, --hooks and --max-concurrent must be at least 1".to_owned());
    }
    if args.idle_secs == 0 || args.idle_secs > 600 {
        return Err("--idle-secs must be between 1 and 600".to_owned());
    }
    if let Some(list) = args.scenarios.as_mut() {
        *list = parse_scenario_m(&scenario_m)?;
        if !retained_given {
            args.retained = 1_000_000;
        }
    }
    if args.binlog && args.idle_wake.is_none() {
        return Err("--binlog goes with --idle-wake".to_owned());
    }
    if let Some(n) = args.idle_wake.as_mut() {
        if instances == 0 || instances > 16 {
            return Err("--instances must be between 1 and 16".to_owned());
        }
        *n = instances;
        if !idle_secs_given {
            args.idle_secs = 10;
        }
    }
    if soak.secs > 0 {
        soak.check()?;
        args.soak = Some(soak);
    }
    Ok(args)
}

/// `default,512` → the daemon's own `MAX_CONCURRENT`, then 512.
fn parse_scenario_m(list: &str) -> Result<Vec<Option<usize>>, String> {
    list.split(',')
        .map(str::trim)
        .map(|m| match m {
            "default" => Ok(None),
            n => match n.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(format!(
                    "--scenario-m: {n:?} is neither `default` nor a count"
                )),
            },
        })
        .collect()
}

/// Daemon settings shared by the bench and the daemon: the variables the
/// daemon is started with, and the windows/pool they give.
pub(crate) struct DaemonSettings {
    /// The diagnostics address (`GORGE_LISTEN_ADDR`).
    pub(crate) listen: SocketAddr,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) windows: Windows,
    pub(crate) pool_max: usize,
}

pub(crate) fn daemon_settings(args: &Args, namespace: &str, listen: SocketAddr) -> DaemonSettings {
    let mut env = database_env(namespace);
    env.extend([
        (
            "GORGE_WEBHOOK_OUTBOUND_ALLOW".to_owned(),
            "127.0.0.1/32".to_owned(),
        ),
        ("GORGE_LISTEN_ADDR".to_owned(), listen.to_string()),
    ]);
    if let Some(m) = args.max_concurrent {
        env.push(("GORGE_WEBHOOK_MAX_CONCURRENT".to_owned(), m.to_string()));
    }
    // Later entries win, both here and in the child's environment.
    env.extend(args.extra_env.iter().cloned());
    let lookup = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let windows = Settings::from_lookup(&lookup)
        .and_then(Windows::try_new)
        .expect("bench: the daemon settings are valid");
    let pool_max = MysqlConfig::from_lookup(&lookup)
        .expect("bench: the database settings are valid")
        .pool_max;
    DaemonSettings {
        listen,
        env,
        windows,
        pool_max,
    }
}
