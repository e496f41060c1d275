//! The layering rules, checked on `cargo tree` output: `webhook-core` knows
//! nothing of MySQL, HTTP or the tokio runtime; only `store-mysql` speaks
//! SQL; only `transport-hyper` speaks HTTP; `webhook-admin` takes the
//! daemon's settings registry without its server or allocator; nothing
//! links OpenSSL or a second TLS crypto provider.

use std::process::Command;

/// A crate that must not appear, optionally only with some features on.
pub(crate) struct Ban {
    krate: &'static str,
    features: &'static [&'static str],
}

const fn ban(krate: &'static str) -> Ban {
    Ban {
        krate,
        features: &[],
    }
}

/// tokio's runtime-bearing features; `sync` alone is runtime-agnostic.
const TOKIO_RUNTIME: Ban = Ban {
    krate: "tokio",
    features: &[
        "rt",
        "rt-multi-thread",
        "net",
        "time",
        "fs",
        "process",
        "signal",
        "io-std",
    ],
};

const NO_TLS_BUT_RUSTLS_RING: [Ban; 5] = [
    ban("openssl"),
    ban("openssl-sys"),
    ban("native-tls"),
    ban("aws-lc-rs"),
    ban("aws-lc-sys"),
];

struct Rule {
    package: &'static str,
    why: &'static str,
    bans: &'static [Ban],
}

const RULES: &[Rule] = &[
    Rule {
        package: "webhook-core",
        why: "webhook-core knows nothing of MySQL, HTTP or the tokio runtime",
        bans: &[
            ban("mysql_async"),
            ban("mysql_common"),
            ban("hyper"),
            ban("hyper-util"),
            ban("hyper-rustls"),
            ban("h2"),
            ban("rustls"),
            ban("mio"),
            ban("socket2"),
            TOKIO_RUNTIME,
        ],
    },
    Rule {
        package: "webhook-store-mysql",
        why: "only transport-hyper speaks HTTP to receivers",
        bans: &[
            ban("hyper"),
            ban("hyper-util"),
            ban("hyper-rustls"),
            ban("h2"),
        ],
    },
    Rule {
        package: "webhook-transport-hyper",
        why: "only store-mysql speaks SQL",
        bans: &[ban("mysql_async"), ban("mysql_common")],
    },
    Rule {
        package: "webhook-admin",
        why: "webhook-admin takes the daemon's settings registry (webhook-daemon without \
              its `server` feature), not its HTTP server, metrics, log output or allocator",
        bans: &[
            Ban {
                krate: "webhook-daemon",
                features: &["server", "default"],
            },
            ban("tikv-jemallocator"),
            ban("tikv-jemalloc-sys"),
            ban("prometheus-client"),
            ban("tracing-appender"),
            ban("tracing-subscriber"),
        ],
    },
];

/// One `cargo tree --prefix none -e …,features` line: a package or one of
/// its enabled features.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TreeLine<'a> {
    Package(&'a str),
    Feature(&'a str, &'a str),
}

pub(crate) fn parse_line(line: &str) -> Option<TreeLine<'_>> {
    let mut words = line.split_whitespace();
    let name = words.next()?;
    match words.next()? {
        "feature" => Some(TreeLine::Feature(name, words.next()?.trim_matches('"'))),
        version if version.starts_with('v') => Some(TreeLine::Package(name)),
        _ => None,
    }
}

/// Which bans the tree output violates.
pub(crate) fn violations(tree: &str, bans: &[Ban]) -> Vec<String> {
    let lines: Vec<TreeLine<'_>> = tree.lines().filter_map(parse_line).collect();
    let mut found = Vec::new();
    for ban in bans {
        let hit = if ban.features.is_empty() {
            lines.contains(&TreeLine::Package(ban.krate))
        } else {
            lines.iter().any(|line| {
                matches!(line, TreeLine::Feature(k, f) if *k == ban.krate && ban.features.contains(f))
            })
        };
        if hit {
            let what = if ban.features.is_empty() {
                ban.krate.to_owned()
            } else {
                format!("{} with features {:?}", ban.krate, ban.features)
            };
            found.push(what);
        }
    }
    found
}

fn tree(package: Option<&str>, edges: &str) -> Result<String, String> {
    let mut command = Command::new("cargo");
    command.args(["tree", "--prefix", "none", "-e", edges]);
    match package {
        Some(package) => command.args(["-p", package]),
        None => command.arg("--workspace"),
    };
    let output = command
        .output()
        .map_err(|e| format!("could not run cargo tree: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("cargo tree output: {e}"))
}

/// Checks every rule; the error lists each violation with its reason.
pub(crate) fn check() -> Result<(), String> {
    let mut problems = Vec::new();
    for rule in RULES {
        let tree = tree(Some(rule.package), "normal,features")?;
        for what in violations(&tree, rule.bans) {
            problems.push(format!("{} depends on {what}: {}", rule.package, rule.why));
        }
    }
    let everything = tree(None, "normal,build,dev,features")?;
    for what in violations(&everything, &NO_TLS_BUT_RUSTLS_RING) {
        problems.push(format!(
            "the workspace depends on {what}: TLS is rustls with ring only"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("layering violated:\n  {}", problems.join("\n  ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_packages_and_features() {
        assert_eq!(
            parse_line("tokio v1.54.1"),
            Some(TreeLine::Package("tokio"))
        );
        assert_eq!(
            parse_line("async-trait v0.1.92 (proc-macro)"),
            Some(TreeLine::Package("async-trait"))
        );
        assert_eq!(
            parse_line(r#"tokio feature "rt" (*)"#),
            Some(TreeLine::Feature("tokio", "rt"))
        );
        assert_eq!(parse_line(""), None);
    }

    #[test]
    fn bans_catch_packages_and_runtime_features() {
        let tree = "futures v0.3.34\ntokio v1.54.1\ntokio feature \"sync\"\n";
        assert!(violations(tree, &[TOKIO_RUNTIME]).is_empty());
        let with_rt = format!("{tree}tokio feature \"rt\"\n");
        assert_eq!(violations(&with_rt, &[TOKIO_RUNTIME]).len(), 1);
        assert_eq!(
            violations("hyper v1.8.0\n", &[ban("hyper")]),
            vec!["hyper".to_owned()]
        );
    }

    #[test]
    fn the_admin_rule_catches_the_daemons_server() {
        let admin = RULES
            .iter()
            .find(|rule| rule.package == "webhook-admin")
            .expect("a rule for webhook-admin");
        let registry_only = "webhook-daemon v0.1.0\nwebhook-core v0.1.0\n";
        assert!(violations(registry_only, admin.bans).is_empty());
        let with_server =
            format!("{registry_only}webhook-daemon feature \"server\"\ntikv-jemallocator v0.7.0\n");
        assert_eq!(violations(&with_server, admin.bans).len(), 2);
    }

    /// The rules hold on the real dependency graph.
    #[test]
    fn the_workspace_obeys_the_layering_rules() {
        if let Err(problems) = check() {
            panic!("{problems}");
        }
    }
}
