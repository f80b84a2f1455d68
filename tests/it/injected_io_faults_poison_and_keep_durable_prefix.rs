//! After an injected write, fsync or segment-creation failure the log refuses further work
//! (Error::Poisoned) and reopens, with the real file system and from a crash image, to a prefix
//! of what was appended that holds every record whose flush returned Ok.

use crate::support;

use std::path::Path;

use support::faults::{Effect, FaultStorage, Op, Tear};
use support::{Rng, check_payload, config_4k_pages, payload_for};
use walcrypt::{Error, KeyRing, Lsn, Mode, SyncMode, Wal};

const EIO: i32 = libc::EIO;
const ENOSPC: i32 = libc::ENOSPC;

struct Outcome {
    /// Highest id whose flush returned Ok.
    acked: u64,
    /// Highest id appended successfully.
    appended: u64,
    /// The error that stopped the run, if a fault fired.
    error: Option<String>,
}

/// Appends records 1, 2, ... (flushing every third) through `storage` until an error or
/// `limit` records; after an error, checks that the log refuses further work.
fn run(dir: &Path, mode: Mode, keys: &KeyRing, storage: &FaultStorage, limit: u64) -> Outcome {
    let config = config_4k_pages(mode, keys, SyncMode::Durable).storage(storage.arc());
    let mut out = Outcome {
        acked: 0,
        appended: 0,
        error: None,
    };
    let wal = match Wal::open(dir, config) {
        Ok(wal) => wal,
        Err(e) => {
            out.error = Some(format!("open: {e}"));
            return out;
        }
    };
    let mut failed = false;
    // Whether the failed call returned `Error::Poisoned` rather than its own error.
    let mut first_poisoned = false;
    for id in 1..=limit {
        let (kind, payload) = payload_for(id);
        let lsn = match wal.append(kind, &payload) {
            Ok(lsn) => lsn,
            Err(e) => {
                first_poisoned = matches!(e, Error::Poisoned(_));
                out.error = Some(format!("append {id}: {e}"));
                failed = true;
                break;
            }
        };
        out.appended = id;
        if id % 3 == 0 {
            match wal.flush(lsn) {
                Ok(()) => out.acked = id,
                Err(e) => {
                    first_poisoned = matches!(e, Error::Poisoned(_));
                    out.error = Some(format!("flush {id}: {e}"));
                    failed = true;
                    break;
                }
            }
        }
    }
    if failed {
        // The failed call returned the I/O error itself; the log says it is poisoned, and why.
        let cause = wal
            .poison_cause()
            .expect("a failed write-out poisons the log");
        let first = out.error.as_deref().unwrap_or_default();
        assert!(
            !first_poisoned,
            "the failing call returns its own error, not Poisoned: {first}"
        );
        assert!(
            first.contains(cause.op),
            "the cause ({cause}) names the operation the failed call reported: {first}"
        );
        if matches!(cause.op, "write segment" | "write page") {
            assert!(
                first.contains("at offset ") && first.contains("(lsn "),
                "a failed write names its offset and LSN: {first}"
            );
        }
        let (kind, payload) = payload_for(limit + 1);
        let again = wal.append(kind, &payload);
        assert!(
            matches!(again, Err(Error::Poisoned(_))),
            "append after a failure must be refused as poisoned, got {again:?}"
        );
        let flush = wal.flush(Lsn(0));
        assert!(
            matches!(flush, Err(Error::Poisoned(_))),
            "flush after a failure must be refused as poisoned, got {flush:?}"
        );
        let msg = flush.unwrap_err().to_string();
        assert!(
            msg.contains("reopen"),
            "poison message should say what to do: {msg}"
        );
        assert!(
            matches!(wal.close(), Err(Error::Poisoned(_))),
            "close after a failure must report it"
        );
    } else {
        assert!(
            wal.poison_cause().is_none(),
            "a healthy log has no poison cause"
        );
        wal.close().expect("close without faults");
    }
    out
}

/// Opens `dir` with the real file system and checks it holds records 1..=m in order, with
/// `acked <= m <= appended`; then appends one more record and reads it back. Returns m.
fn verify_prefix(dir: &Path, mode: Mode, keys: &KeyRing, out: &Outcome, what: &str) -> u64 {
    let config = config_4k_pages(mode, keys, SyncMode::Durable);
    let mut ids = Vec::new();
    let wal = Wal::open_and_replay(dir, config.clone(), Lsn::default(), |rec| {
        ids.push(check_payload(rec.kind, &rec.payload).map_err(|e| panic!("{what}: {e}"))?);
        Ok(())
    })
    .unwrap_or_else(|e| {
        panic!(
            "{what}: reopen failed: {e} (run ended with {:?})",
            out.error
        )
    });
    let m = ids.len() as u64;
    assert_eq!(
        ids,
        (1..=m).collect::<Vec<_>>(),
        "{what}: not a prefix in order"
    );
    assert!(
        m >= out.acked,
        "{what}: lost acknowledged records: {m} back, {} acked ({:?})",
        out.acked,
        out.error
    );
    assert!(
        m <= out.appended,
        "{what}: {m} records back but only {} appended",
        out.appended
    );
    let lsn = wal.append(7, b"after reopen").unwrap();
    wal.flush(lsn).unwrap();
    wal.close().unwrap();
    let all = support::try_read_records(dir, keys).unwrap();
    assert_eq!(all.len() as u64, m + 1, "{what}: record after reopen");
    assert_eq!(all.last().unwrap().payload, b"after reopen");
    m
}

/// Runs one fault plan in every mode; checks the real directory and a crash image.
fn scenario(name: &str, plan: impl Fn(&FaultStorage), limit: u64) -> u64 {
    let mut injected = 0;
    for (i, mode) in Mode::ALL.into_iter().enumerate() {
        let keys = KeyRing::generate().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("wal");
        let storage = FaultStorage::new();
        plan(&storage);
        let out = run(&dir, mode, &keys, &storage, limit);
        injected += storage.injected();
        let what = format!("{name} {mode}");
        assert!(
            storage.injected() > 0 && out.error.is_some(),
            "{what}: the planned fault never fired"
        );
        let image = tmp.path().join("image");
        let mut rng = Rng::new(0xFA17 + i as u64);
        storage.crash_image(&dir, &image, &mut rng, Tear::Prefix);
        verify_prefix(&dir, mode, &keys, &out, &format!("{what} (live files)"));
        verify_prefix(&image, mode, &keys, &out, &format!("{what} (crash image)"));
    }
    injected
}

#[test]
fn failed_fsync_poisons_and_reopens_to_acked_prefix() {
    // Syncs 1-2 belong to creating the first segment; later ones to flushes and rolls.
    for nth in [3, 4, 7, 12, 25] {
        scenario(
            &format!("fsync #{nth} EIO"),
            |s| s.fail_nth(Op::Sync, nth, Effect::Errno(EIO)),
            400,
        );
    }
}

#[test]
fn failed_fsync_that_keeps_failing_poisons() {
    scenario(
        "every fsync from #5 EIO",
        |s| s.fail_from(Op::Sync, 5, Effect::Errno(EIO)),
        400,
    );
}

#[test]
fn failed_write_poisons_and_reopens_to_acked_prefix() {
    for nth in [1, 2, 5, 9, 20, 33] {
        scenario(
            &format!("write #{nth} EIO"),
            |s| s.fail_nth(Op::Write, nth, Effect::Errno(EIO)),
            400,
        );
    }
}

#[test]
fn short_write_and_enospc_poison_and_reopen_to_acked_prefix() {
    for nth in [2, 6, 15, 31] {
        scenario(
            &format!("write #{nth} short then ENOSPC"),
            |s| s.fail_nth(Op::Write, nth, Effect::ShortWrite(ENOSPC)),
            400,
        );
        scenario(
            &format!("every write from #{nth} ENOSPC"),
            |s| s.fail_from(Op::Write, nth, Effect::Errno(ENOSPC)),
            400,
        );
    }
}

#[test]
fn enospc_while_creating_a_segment_leaves_no_half_made_segment() {
    // Create #1 is the first segment (at open); later ones are segment rolls.
    for nth in [1, 2, 3] {
        scenario(
            &format!("create #{nth} ENOSPC"),
            |s| s.fail_nth(Op::Create, nth, Effect::Errno(ENOSPC)),
            400,
        );
    }
    // Extending the new file to its full size runs out of space: the temporary file exists.
    for nth in [1, 2, 3] {
        scenario(
            &format!("set_len #{nth} ENOSPC"),
            |s| s.fail_nth(Op::SetLen, nth, Effect::Errno(ENOSPC)),
            400,
        );
    }
    for nth in [1, 2] {
        scenario(
            &format!("rename #{nth} EIO"),
            |s| s.fail_nth(Op::Rename, nth, Effect::Errno(EIO)),
            400,
        );
        scenario(
            &format!("directory sync #{nth} EIO"),
            |s| s.fail_nth(Op::SyncDir, nth, Effect::Errno(EIO)),
            400,
        );
    }
}

#[test]
fn segment_creation_failure_leaves_no_stray_files() {
    let keys = KeyRing::generate().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let storage = FaultStorage::new();
    storage.fail_nth(Op::SetLen, 2, Effect::Errno(ENOSPC));
    let out = run(&dir, Mode::PerRecord, &keys, &storage, 400);
    assert!(out.error.is_some());
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name == "LOCK" || walcrypt::inspect::parse_segment_file_name(&name).is_some(),
            "stray file {name} after a failed segment creation"
        );
    }
    verify_prefix(&dir, Mode::PerRecord, &keys, &out, "after set_len ENOSPC");
}
