//! A checkpoint's metadata is sealed with AES-256-GCM in every encrypted mode, its LSN and log
//! in the associated data. Someone who can write the files but lacks the key could otherwise
//! rewrite the control file with key id 0 ("stored in the clear", which only a plaintext log
//! without keys writes), a position and metadata of their choosing, and a correct CRC32C: the
//! engine would restore the snapshot they name and replay from where they say. Refused in the
//! encrypted modes, by `Checkpoint::read` and by `Wal::open`; a plaintext log keeps its clear
//! checkpoints.

use walcrypt::{Checkpoint, Config, Error, KeyRing, Lsn, Mode, Reader, Wal};

/// The control file rebuilt with `checkpoint` (`meta` at an LSN, in the clear) or none in place
/// of its own, its holds kept and its CRC32C made right (layout in docs/FORMAT.md, "Control
/// file"): what someone without the key can write.
fn rebuilt(genuine: &[u8], checkpoint: Option<(Lsn, &[u8])>) -> Vec<u8> {
    let stored = u32::from_le_bytes(genuine[53..57].try_into().unwrap()) as usize;
    let holds = &genuine[57 + stored..genuine.len() - 4];
    let mut out = genuine[..28].to_vec();
    match checkpoint {
        Some((lsn, meta)) => {
            out.push(1);
            out.extend_from_slice(&lsn.0.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&[0u8; 12]);
            out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
            out.extend_from_slice(meta);
        }
        None => {
            out.push(0);
            out.extend_from_slice(&[0u8; 8 + 4 + 12]);
        }
    }
    out.extend_from_slice(holds);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn a_checkpoint_rewritten_in_the_clear_is_refused_in_an_encrypted_log() {
    for mode in Mode::ALL {
        let tmp = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = || match mode {
            Mode::Plaintext => Config::new(mode),
            _ => Config::new(mode).keys(keys.clone()),
        };
        let lsns: Vec<Lsn> = {
            let wal = Wal::open(tmp.path(), config()).unwrap();
            let lsns: Vec<Lsn> = (0..50u8)
                .map(|i| wal.append(1, &[i; 64]).unwrap())
                .collect();
            wal.flush(lsns[49]).unwrap();
            wal.checkpoint(lsns[49], b"snapshot-000050").unwrap();
            wal.close().unwrap();
            lsns
        };
        let control = tmp.path().join("walcrypt.control");
        let genuine = std::fs::read(&control).unwrap();
        std::fs::write(
            &control,
            rebuilt(&genuine, Some((lsns[10], b"snapshot-000011"))),
        )
        .unwrap();

        let read = Checkpoint::read(tmp.path(), &config());
        let opened = Wal::open(tmp.path(), config()).map(|_| ());
        if mode == Mode::Plaintext {
            let cp = read.unwrap().expect("a checkpoint");
            assert_eq!((cp.lsn, &cp.meta[..]), (lsns[10], &b"snapshot-000011"[..]));
            opened.unwrap();
            continue;
        }
        for (what, result) in [
            ("Checkpoint::read", read.map(|_| ())),
            ("Wal::open", opened),
        ] {
            match result {
                Err(e @ Error::Control { .. }) => {
                    assert!(e.to_string().contains("in the clear"), "{mode} {what}: {e}")
                }
                other => panic!("{mode} {what}: a checkpoint forged in the clear: {other:?}"),
            }
        }
    }
}

/// `Wal::open_from_checkpoint` with callbacks that do nothing, and whether `restore` was called.
/// 512-byte pages and 4 KiB segments, with `keys` in the encrypted modes.
fn small_config(mode: Mode, keys: &KeyRing) -> Config {
    let config = Config::new(mode).page_size(512).segment_size(4096);
    match mode {
        Mode::Plaintext => config,
        _ => config.keys(keys.clone()),
    }
}

/// A new log of 200 records of 64 bytes, flushed and still open: its directory, keys, writer
/// and the records' LSNs.
fn two_hundred_records(mode: Mode) -> (tempfile::TempDir, KeyRing, Wal, Vec<Lsn>) {
    let tmp = tempfile::tempdir().unwrap();
    let keys = KeyRing::generate().unwrap();
    let wal = Wal::open(tmp.path(), small_config(mode, &keys)).unwrap();
    let lsns: Vec<Lsn> = (0..200u8)
        .map(|i| wal.append(1, &[i; 64]).unwrap())
        .collect();
    wal.flush(lsns[199]).unwrap();
    (tmp, keys, wal, lsns)
}

/// Where the oldest segment left in `dir` starts.
fn oldest_segment(dir: &std::path::Path, keys: &KeyRing) -> Lsn {
    Reader::open(dir, Some(keys.clone())).unwrap().segments()[0]
        .header
        .start
}

fn open_from_checkpoint(dir: &std::path::Path, config: Config) -> (walcrypt::Result<Wal>, bool) {
    let mut called = false;
    let opened = Wal::open_from_checkpoint(
        dir,
        config,
        |_| {
            called = true;
            Ok(())
        },
        |_| Ok(()),
    );
    (opened, called)
}

/// A log whose checkpoint let a purge remove its start, then lost that checkpoint (the control
/// file deleted, or rewritten to hold none): `open_from_checkpoint` fails with `Purged` naming
/// LSN 0 and the oldest segment left, and calls neither `restore` nor `replay`. Before, it
/// restored nothing and replayed from the oldest record left: the engine restarted from an
/// empty state without the purged records, and no error. Found by an outside probe. A log
/// never purged still opens from its start when it has no checkpoint.
#[test]
fn a_purged_log_that_lost_its_checkpoint_does_not_open_from_one() {
    for mode in Mode::ALL {
        for loss in ["deleted", "none"] {
            let (tmp, keys, wal, lsns) = two_hundred_records(mode);
            let config = || small_config(mode, &keys);
            wal.checkpoint(lsns[150], b"snapshot-000151").unwrap();
            wal.close().unwrap();
            let oldest = oldest_segment(tmp.path(), &keys);
            assert!(
                oldest > Lsn(0),
                "{mode}: the checkpoint purged the log's start"
            );

            let control = tmp.path().join("walcrypt.control");
            match loss {
                "deleted" => std::fs::remove_file(&control).unwrap(),
                _ => {
                    let genuine = std::fs::read(&control).unwrap();
                    std::fs::write(&control, rebuilt(&genuine, None)).unwrap();
                }
            }
            assert!(
                Checkpoint::read(tmp.path(), &config()).unwrap().is_none(),
                "{mode} {loss}"
            );
            let (opened, called) = open_from_checkpoint(tmp.path(), config());
            match opened {
                Err(Error::Purged { needed, oldest: o }) => {
                    assert_eq!((needed, o), (Lsn(0), oldest), "{mode} {loss}")
                }
                Err(e) => panic!("{mode} {loss}: {e}"),
                Ok(_) => panic!("{mode} {loss}: opened from its oldest record"),
            }
            assert!(!called, "{mode} {loss}: restore was called");
            // A replay asked to start before the oldest segment left says so the same way
            // (it said `LsnNotAvailable`, without the oldest position).
            match Wal::open_and_replay(tmp.path(), config(), lsns[0], |_| Ok(())) {
                Err(Error::Purged { needed, oldest: o }) => {
                    assert_eq!((needed, o), (lsns[0], oldest), "{mode} {loss}")
                }
                Err(e) => panic!("{mode} {loss}: {e}"),
                Ok(_) => panic!("{mode} {loss}: replayed from a purged position"),
            }
        }

        // Never purged: no checkpoint means replay from the start, as before.
        let tmp = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = match mode {
            Mode::Plaintext => Config::new(mode),
            _ => Config::new(mode).keys(keys.clone()),
        };
        let wal = Wal::open(tmp.path(), config.clone()).unwrap();
        wal.append(1, b"first").unwrap();
        wal.close().unwrap();
        let mut replayed = 0;
        let wal = Wal::open_from_checkpoint(
            tmp.path(),
            config,
            |cp| {
                assert!(cp.is_none());
                Ok(())
            },
            |_| {
                replayed += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(replayed, 1, "{mode}");
        wal.close().unwrap();
    }
}

/// The segment holding the checkpoint's position relabelled as format version 3 (its header
/// checksum recomputed, no key needed). In perrecord-gcm, version 3's segment switches carry no
/// tag, so a forged one at the checkpoint's position, in each relabelled segment, would have
/// replay skip their records. The checkpoint's sealed metadata names the version the segment had
/// when it was taken: `Checkpoint::read` and `open_from_checkpoint` refuse the relabelled
/// segment, naming it, before `restore`. Before, the relabel was accepted as a log upgraded
/// from version 3 (the probe that found it skipped 41 records without an error).
#[test]
fn a_checkpoint_segment_relabelled_with_an_older_format_version_is_refused() {
    use crate::support::tamper::rewrite_segment_headers;
    for mode in [Mode::PerRecord, Mode::PageLevel, Mode::PerRecordGcm] {
        let tmp = tempfile::tempdir().unwrap();
        let keys = KeyRing::generate().unwrap();
        let config = || {
            Config::new(mode)
                .page_size(512)
                .segment_size(4096)
                .keys(keys.clone())
        };
        let wal = Wal::open(tmp.path(), config()).unwrap();
        let lsns: Vec<Lsn> = (0..200u8)
            .map(|i| wal.append(1, &[i; 64]).unwrap())
            .collect();
        wal.flush(lsns[199]).unwrap();
        wal.checkpoint(lsns[150], b"snapshot-000151").unwrap();
        wal.close().unwrap();
        let segment = Lsn(u64::from(lsns[150]) / 4096 * 4096);
        // The genuine log reads its checkpoint.
        let cp = Checkpoint::read(tmp.path(), &config()).unwrap().unwrap();
        assert_eq!(cp.lsn, lsns[150], "{mode}");

        rewrite_segment_headers(tmp.path(), |h| {
            if h.start == segment {
                h.version = 3;
            }
        });
        let refused = |e: &Error| {
            matches!(e, Error::Corrupt { at, kind: walcrypt::CorruptionKind::SegmentHeaderField(_) }
                if at.segment == segment)
        };
        match Checkpoint::read(tmp.path(), &config()) {
            Err(e) if refused(&e) => {}
            other => panic!("{mode}: Checkpoint::read: {other:?}"),
        }
        let (opened, called) = open_from_checkpoint(tmp.path(), config());
        match opened {
            Err(e) if refused(&e) => {}
            Err(e) => panic!("{mode}: open_from_checkpoint: {e}"),
            Ok(_) => panic!("{mode}: opened a log relabelled as format version 3"),
        }
        assert!(!called, "{mode}: restore was called");
    }
}

/// A log of format version 3 continued by this build keeps its version 3 segments: a
/// checkpoint at a record in one of them, taken after a reopen, is sealed naming version 3 (the
/// segment's header), and reads back. Found by a review: it was sealed with the version of the
/// log's tail segment at open (4 after the reopen), and the genuine segment was then refused
/// as relabelled.
#[test]
fn a_checkpoint_in_a_version_3_segment_of_a_continued_log_reads_back() {
    for g in crate::golden_files::of_version(3) {
        if g.name.contains("torn") || g.mode == Mode::Plaintext {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        crate::golden_files::copy_log(&g, dir.path());
        let config = || Config::new(g.mode).keys(g.keys.clone());
        let wal = Wal::open(dir.path(), config()).unwrap();
        wal.append(1, b"after the upgrade").unwrap();
        wal.close().unwrap();
        let wal = Wal::open(dir.path(), config()).unwrap();
        let at = g.records.last().unwrap().0;
        wal.checkpoint(at, b"snapshot").unwrap();
        wal.close().unwrap();
        let cp = Checkpoint::read(dir.path(), &config())
            .unwrap_or_else(|e| panic!("{}: {e}", g.name))
            .unwrap();
        assert_eq!(cp.lsn, at, "{}", g.name);
        let (opened, called) = open_from_checkpoint(dir.path(), config());
        opened
            .unwrap_or_else(|e| panic!("{}: {e}", g.name))
            .close()
            .unwrap();
        assert!(called, "{}", g.name);
    }
}

/// An older control file put back (a genuine one, sealed, from before a later checkpoint whose
/// purge removed the earlier checkpoint's segment): `open_from_checkpoint` fails with `Purged`
/// naming that checkpoint's position and the oldest segment left, before `restore` is called.
/// Before, the engine restored the stale checkpoint's state, and only the replay then failed.
/// Found by an outside probe.
#[test]
fn an_older_control_file_put_back_is_refused_before_restore() {
    for mode in Mode::ALL {
        let (tmp, keys, wal, lsns) = two_hundred_records(mode);
        let config = || small_config(mode, &keys);
        wal.checkpoint(lsns[20], b"snapshot-000021").unwrap();
        let control = tmp.path().join("walcrypt.control");
        let older = std::fs::read(&control).unwrap();
        wal.checkpoint(lsns[150], b"snapshot-000151").unwrap();
        wal.close().unwrap();
        let oldest = oldest_segment(tmp.path(), &keys);
        assert!(
            oldest > lsns[20],
            "{mode}: the second checkpoint purged too little"
        );

        std::fs::write(&control, &older).unwrap();
        assert_eq!(
            Checkpoint::read(tmp.path(), &config())
                .unwrap()
                .map(|c| c.lsn),
            Some(lsns[20]),
            "{mode}"
        );
        let (opened, called) = open_from_checkpoint(tmp.path(), config());
        match opened {
            Err(Error::Purged { needed, oldest: o }) => {
                assert_eq!((needed, o), (lsns[20], oldest), "{mode}")
            }
            Err(e) => panic!("{mode}: {e}"),
            Ok(_) => panic!("{mode}: opened from a purged checkpoint"),
        }
        assert!(!called, "{mode}: restore was called");
    }
}
