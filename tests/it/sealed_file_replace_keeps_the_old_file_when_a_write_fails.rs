//! Replacing a sealed file atomically: a write, fsync, rename or directory sync that fails at
//! any step leaves the old file whole (or, once the rename is done, the new one), no temporary
//! file, and crash images in which the file opens as the old or the new contents, never
//! damaged. A writer whose write failed seals nothing more (sealing the chunk again would
//! reuse its nonce).

use crate::support;

use std::io::Write;

use support::Rng;
use support::faults::{Effect, FaultStorage, Op, Tear};
use walcrypt::{Error, KeyRing, SealedFileProblem, SealedFiles};

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

fn leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn failed_replace_at_every_step_keeps_the_old_file() {
    let keys = KeyRing::generate().unwrap();
    let old = vec![0x01u8; 3 * 64];
    let new = vec![0x02u8; 5 * 64 + 9]; // header + 6 chunk writes
    let mut points = vec![
        (Op::Create, 1, Effect::Errno(ENOSPC)),
        (Op::Sync, 1, Effect::Errno(EIO)),
        (Op::Rename, 1, Effect::Errno(EIO)),
        (Op::SyncDir, 1, Effect::Errno(EIO)),
    ];
    for nth in 1..=7 {
        points.push((Op::Write, nth, Effect::Errno(EIO)));
        points.push((Op::Write, nth, Effect::ShortWrite(ENOSPC)));
    }
    for (op, nth, effect) in points {
        let what = format!("{op:?} {nth} {effect:?}");
        let dir = tempfile::tempdir().unwrap();
        let storage = FaultStorage::new();
        let files = SealedFiles::new(&keys)
            .storage(storage.arc())
            .chunk_size(64);
        let path = dir.path().join("manifest");
        files.write(&path, &old).unwrap();
        storage.fail_nth(op, storage.count(op) + nth, effect);

        let err = files.write(&path, &new).unwrap_err();
        assert!(
            err.to_string().contains(&dir.path().display().to_string()),
            "{what}: the error names the file: {err}"
        );
        storage.heal();
        let renamed = op == Op::SyncDir;
        let now = files.read(&path).unwrap();
        assert_eq!(&now, if renamed { &new } else { &old }, "{what}");
        assert!(
            leftovers(dir.path()).is_empty(),
            "{what}: {:?}",
            leftovers(dir.path())
        );

        for seed in 0..8 {
            let image = dir.path().join(format!("image-{seed}"));
            storage.crash_image_with_names(
                dir.path(),
                &image,
                &mut Rng::new(seed),
                Tear::AnySectors,
            );
            let got = SealedFiles::new(&keys).read(image.join("manifest"));
            let got = got.unwrap_or_else(|e| panic!("{what} seed {seed}: {e}"));
            assert!(got == old || got == new, "{what} seed {seed}");
        }
    }
}

#[test]
fn a_writer_whose_write_failed_seals_nothing_more() {
    let keys = KeyRing::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultStorage::new();
    let files = SealedFiles::new(&keys)
        .storage(storage.arc())
        .chunk_size(64);
    let path = dir.path().join("snapshot");
    let mut writer = files.create(&path).unwrap();
    storage.fail_nth(
        Op::Write,
        storage.count(Op::Write) + 2,
        Effect::ShortWrite(ENOSPC),
    );
    let err = writer.write_all(&[7u8; 64 * 4]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
    storage.heal();
    let writes = storage.count(Op::Write);
    let again = writer.write_all(&[7u8; 64 * 4]).unwrap_err();
    let inner = again.into_inner().unwrap().downcast::<Error>().unwrap();
    assert!(matches!(
        *inner,
        Error::SealedFile {
            problem: SealedFileProblem::WriterFailed,
            ..
        }
    ));
    let finished = writer.finish().unwrap_err();
    assert!(
        finished.to_string().contains("seals nothing more"),
        "{finished}"
    );
    assert_eq!(
        storage.count(Op::Write),
        writes,
        "nothing written after the failure"
    );
    assert!(
        files.read(&path).is_err(),
        "the unfinished file never opens"
    );
}
