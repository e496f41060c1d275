//! Replays what the fuzzer keeps: `fuzz/corpus/<target>/` (the minimised
//! corpus of the long runs) and `fuzz/regressions/<target>/` (inputs that
//! once failed), then a few thousand
//! pseudo-random inputs per target from fixed seeds, so a change that
//! breaks a property fails `cargo test` without libFuzzer. A failure names
//! the file or the seed.

use std::path::{Path, PathBuf};

use webhook_fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn replay_dir(kind: &str) -> usize {
    let mut replayed = 0;
    for (name, run) in TARGETS {
        for path in inputs(&fuzz_dir().join(kind).join(name)) {
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            eprintln!("replaying {}", path.display());
            run(&data);
            replayed += 1;
        }
    }
    replayed
}

#[test]
fn the_corpus_replays() {
    let replayed = replay_dir("corpus");
    // The corpus is committed; an empty one means a broken path.
    assert!(replayed > 40, "only {replayed} corpus inputs found");
}

#[test]
fn the_regressions_replay() {
    assert!(replay_dir("regressions") > 0, "fuzz/regressions/ is empty");
}

/// xorshift64*: fixed seeds, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let len = self.next() % (max_len + 1);
        (0..len).map(|_| self.next().to_le_bytes()[3]).collect()
    }
}

/// Raw random bytes rarely make JSON, so the properties target also gets
/// random texts built from JSON's own tokens.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1.5e3",
    "\"transactionPHIDs\"",
    "\"triggerPHIDs\"",
    "\"errorCode\"",
    "\"errorType\"",
    "\"retry\"",
    "\"forever\"",
    "\"PHID-XACT-a\"",
    "\\u00e9",
    "\\ud83d\\ude00",
    "\\/",
    "/",
    " ",
    "\u{e9}",
];

fn json_like(rng: &mut Rng) -> Vec<u8> {
    let mut text = String::from("{");
    for _ in 0..rng.next() % 24 {
        text.push_str(TOKENS[(rng.next() % TOKENS.len() as u64) as usize]);
    }
    text.into_bytes()
}

#[test]
fn random_inputs_hold() {
    for (name, run) in TARGETS {
        for seed in 1..=1500u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let data = rng.bytes(1024);
            eprintln!("{name}: seed {seed}");
            run(&data);
            if *name == "properties" {
                run(&json_like(&mut rng));
            }
        }
    }
}
