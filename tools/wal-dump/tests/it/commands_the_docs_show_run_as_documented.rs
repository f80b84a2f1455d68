//! The wal-dump and wal-key commands that the README and docs/WAL-DUMP.md show (in code blocks
//! and inline code) run as documented on small logs made here, with the documents' paths and
//! placeholders replaced by real ones; the kinds file shown in WAL-DUMP.md is one wal-dump
//! reads; and WAL-DUMP.md's options table and `wal-dump --help` name the same flags. A command
//! added to the documents fails this test until it is run here (or named a mention).

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use support::*;
use walcrypt::Mode;

/// The README and docs/WAL-DUMP.md of the repository (tools/wal-dump is two levels below its
/// root), or `None` where they are not (the packaged crate alone): then there is nothing to
/// check.
fn documents() -> Option<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).ok();
    let documents = read("README.md").zip(read("docs/WAL-DUMP.md"));
    if documents.is_none() {
        eprintln!("README.md or docs/WAL-DUMP.md not found beside the crate: nothing to check");
    }
    documents
}

/// Inline mentions of a command, not commands to run: each is shown in full elsewhere.
const MENTIONS: [&str; 9] = [
    "wal-dump --repair --backup DIR",
    "wal-dump --stats",
    "wal-dump --verify",
    "wal-key rotate-kek",
    "wal-key new",
    "wal-key list",
    "wal-key verify",
    "wal-key wrap",
    "wal-key rotate",
];

/// Every wal-dump or wal-key command line in `doc`: lines of code blocks and inline code that
/// start with the tool's name or with `cargo run --release --bin <tool> --`, without the
/// comment that may follow them.
fn documented_commands(doc: &str) -> BTreeSet<String> {
    let is_command = |text: &str| {
        text.starts_with("wal-dump ")
            || text.starts_with("wal-key ")
            || text.starts_with("cargo run --release --bin wal-")
    };
    let mut commands = BTreeSet::new();
    let mut in_block = false;
    for line in doc.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            // A comment after a command starts at a run of spaces.
            let command = line.split("  ").next().unwrap_or("").trim();
            if is_command(command) {
                commands.insert(command.to_string());
            }
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1 && is_command(span) {
                commands.insert(span.to_string());
            }
        }
    }
    commands
}

/// Runs `command` as the documents show it: `cargo run --release --bin <tool> --` becomes the
/// built tool, each token found in `vars` becomes its value, and an optional `[...]` part is
/// kept (without brackets) when its first word is in `keep`, else left out.
fn run(command: &str, keep: &[&str], vars: &[(&str, &Path)]) -> Output {
    let command = command
        .strip_prefix("cargo run --release --bin ")
        .map(|rest| rest.replacen(" -- ", " ", 1))
        .unwrap_or_else(|| command.to_string());
    let mut words = Vec::new();
    let mut optional: Option<Vec<&str>> = None;
    for word in command.split_whitespace() {
        match (&mut optional, word.strip_prefix('[')) {
            (None, Some(first)) => optional = Some(vec![first]),
            (Some(part), _) => part.push(word),
            (None, None) => words.push(word),
        }
        if let Some(part) = &mut optional
            && let Some(last) = part.last_mut()
            && let Some(inner) = last.strip_suffix(']')
        {
            *last = inner;
            if keep.contains(&part[0]) {
                words.extend(part.iter());
            }
            optional = None;
        }
    }
    let tool = match words[0] {
        "wal-dump" => env!("CARGO_BIN_EXE_wal-dump"),
        "wal-key" => env!("CARGO_BIN_EXE_wal-key"),
        other => panic!("not a tool: {other}"),
    };
    let mut cmd = Command::new(tool);
    for word in &words[1..] {
        match vars.iter().find(|(name, _)| name == word) {
            Some((_, value)) => cmd.arg(value),
            None => cmd.arg(word),
        };
    }
    cmd.output().expect("run the tool")
}

fn assert_ok(o: &Output, command: &str) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{command}\nstdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

#[test]
fn every_command_the_docs_show_runs_as_documented() {
    let Some((readme, wal_dump_md)) = documents() else {
        return;
    };
    let documented: BTreeSet<String> = documented_commands(&readme)
        .into_iter()
        .chain(documented_commands(&wal_dump_md))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut ran = BTreeSet::new();
    let mut ok = |command: &str, keep: &[&str], vars: &[(&str, &Path)]| {
        let o = run(command, keep, vars);
        assert_ok(&o, command);
        ran.insert(command.to_string());
        o
    };

    // Logs: what `quickstart --keep DIR` leaves (a perrecord log beside its key file), and a
    // log of the test's own.
    let quick = dir.join("quick");
    std::fs::create_dir(&quick).unwrap();
    let (keys, _) = new_key_file(&quick);
    append(&quick.join("perrecord"), Mode::PerRecord, &keys, 0, 20);
    let (log, ring, _, _) = make_log(dir, Mode::PerRecord, 50);

    // README.
    let o = ok(
        "wal-dump --key-file DIR/keys DIR/perrecord",
        &[],
        &[
            ("DIR/keys", &quick.join("keys")),
            ("DIR/perrecord", &quick.join("perrecord")),
        ],
    );
    assert!(stdout(&o).lines().count() == 20, "{}", stdout(&o));
    ok(
        "cargo run --release --bin wal-dump -- <dir>",
        &[],
        &[("<dir>", &log)],
    );
    ok("cargo run --release --bin wal-key -- --help", &[], &[]);

    // WAL-DUMP.md: the synopsis.
    ok(
        "cargo run --release --bin wal-dump -- [OPTIONS] <PATH>",
        &[],
        &[("<PATH>", &log)],
    );
    let o = ok(
        "cargo run --release --bin wal-key -- <COMMAND> ...",
        &[],
        &[("<COMMAND>", Path::new("list")), ("...", &ring)],
    );
    assert!(stdout(&o).contains("active"), "{}", stdout(&o));

    // --repair on a clean log leaves it alone.
    let o = ok(
        "wal-dump --repair --backup /var/tmp/wal-cut-2026-11-30 --key-file keys /var/lib/db/wal",
        &[],
        &[
            ("/var/tmp/wal-cut-2026-11-30", &dir.join("backup")),
            ("keys", &ring),
            ("/var/lib/db/wal", &log),
        ],
    );
    assert!(stdout(&o).contains("no damage found"), "{}", stdout(&o));

    // wal-key, in an order where each command has what it needs.
    let (kek, new_kek) = (dir.join("kek"), dir.join("kek-2"));
    let (store, wrapped, new_ring) = (dir.join("store"), dir.join("wrapped"), dir.join("ring-2"));
    ok("wal-key kek-new FILE", &[], &[("FILE", &kek)]);
    ok("wal-key new FILE", &[], &[("FILE", &new_ring)]);
    ok(
        "wal-key init STORE --kek-file K",
        &[],
        &[("STORE", &store), ("K", &kek)],
    );
    ok(
        "wal-key wrap RING STORE --kek-file K",
        &[],
        &[("RING", &new_ring), ("STORE", &wrapped), ("K", &kek)],
    );
    let rotate = "wal-key rotate FILE [--kek-file K]";
    ok(rotate, &["--kek-file"], &[("FILE", &store), ("K", &kek)]);
    ok(rotate, &[], &[("FILE", &new_ring)]);
    wal_key_ok(&["kek-new", path(&new_kek)]);
    ok(
        "wal-key rotate-kek STORE --kek-file OLD --new-kek-file NEW",
        &[],
        &[("STORE", &store), ("OLD", &kek), ("NEW", &new_kek)],
    );
    let o = ok("wal-key list FILE", &[], &[("FILE", &store)]);
    assert!(stdout(&o).contains("decrypt-only"), "{}", stdout(&o));
    let verify = "wal-key verify FILE [--kek-file K] [--log DIR]";
    ok(
        verify,
        &["--kek-file"],
        &[("FILE", &store), ("K", &new_kek)],
    );
    ok(verify, &["--log"], &[("FILE", &ring), ("DIR", &log)]);

    let missing: Vec<&String> = documented
        .iter()
        .filter(|c| !ran.contains(*c) && !MENTIONS.contains(&c.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "documented commands this test does not run: {missing:?}"
    );
    let gone: Vec<&String> = ran.iter().filter(|c| !documented.contains(*c)).collect();
    assert!(
        gone.is_empty(),
        "commands run here that the documents no longer show: {gone:?}"
    );
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn wal_key_ok(args: &[&str]) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wal-key"));
    let o = cmd.args(args).output().unwrap();
    assert_ok(&o, &args.join(" "));
}

#[test]
fn the_kinds_file_wal_dump_md_shows_is_one_wal_dump_reads() {
    let Some((_, wal_dump_md)) = documents() else {
        return;
    };
    let section = wal_dump_md
        .split("## Record kinds")
        .nth(1)
        .expect("a Record kinds section");
    let example = section
        .split("```")
        .nth(1)
        .expect("a code block in the Record kinds section");
    let tmp = tempfile::tempdir().unwrap();
    let kinds = tmp.path().join("kinds");
    std::fs::write(&kinds, example.trim_start_matches('\n')).unwrap();
    let (log, _, _, _) = make_log(tmp.path(), Mode::Plaintext, 8);
    let o = wal_dump(&[&"--kinds", &kinds, &"--kind", &"commit", &log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("kind: 2 (commit)"), "{}", stdout(&o));
}

#[test]
fn the_options_table_and_help_name_the_same_flags() {
    let help = stdout(&wal_dump(&[&"--help"]));
    let flags = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|w| {
                w.strip_prefix("--")
                    .is_some_and(|f| f.starts_with(char::is_alphabetic))
            })
            .map(str::to_string)
            .collect()
    };
    let Some((_, wal_dump_md)) = documents() else {
        return;
    };
    let table = wal_dump_md
        .split("## Options")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("an Options section");
    let in_help: BTreeSet<String> = flags(&help)
        .into_iter()
        .filter(|f| f != "--help" && f != "--version")
        .collect();
    let in_table = flags(table);
    let help_only: Vec<_> = in_help.difference(&in_table).collect();
    let table_only: Vec<_> = in_table.difference(&in_help).collect();
    assert!(
        help_only.is_empty(),
        "flags in --help missing from WAL-DUMP.md's options: {help_only:?}"
    );
    assert!(
        table_only.is_empty(),
        "flags in WAL-DUMP.md's options missing from --help: {table_only:?}"
    );
}
