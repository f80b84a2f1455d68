//! Key ring files: an error about a key line never repeats a field of it (a swapped line puts
//! the key first); save writes mode 0600 through a fresh temporary file, whatever is lying at
//! the old fixed temporary name (a 0644 file, a symlink), replaces a 0644 file with a 0600 one,
//! leaves no temporary file behind; save_new never replaces anything, not even a symlink.

use std::os::unix::fs::PermissionsExt;

use walcrypt::{Error, KeyRing};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn key_files_written_privately_and_never_echoed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // A swapped line, and other malformed lines: no error shows any 8 characters of a field.
    let key = "3ca719e2b4d8f01a6e2c9b7d5a3f1e0c2b4d6f8a0c1e3f5a7b9d1f3e5a8cd3e5";
    for text in [
        format!("{key} 1\n"),
        format!("x{key} {key}\n"),
        format!("1 {key}zz\n"),
        format!("1 {}\n", &key[..63]),
        format!("1 {key} {key}\n"),
        format!("1 {}g\n", &key[..63]),
    ] {
        let path = dir.join("bad");
        std::fs::write(&path, &text).unwrap();
        let err = KeyRing::load(&path).unwrap_err();
        assert!(matches!(err, Error::KeyFile { line: 1, .. }), "{err:?}");
        let shown = format!("{err} {err:?}");
        for i in 0..key.len() - 8 {
            assert!(!shown.contains(&key[i..i + 8]), "{shown}");
        }
    }
    // Not UTF-8: an error, not a panic.
    let path = dir.join("binary");
    std::fs::write(&path, [0xff, 0xfe, 0x31, 0x20]).unwrap();
    assert!(KeyRing::load(&path).is_err());

    let ring = KeyRing::generate().unwrap();
    let path = dir.join("ring");

    // Leftovers at the old fixed temporary name: a 0644 file and, for a second save, a symlink.
    let victim = dir.join("victim");
    std::fs::write(&victim, "do not touch").unwrap();
    let old_tmp = dir.join("ring.tmp-keyring");
    std::fs::write(&old_tmp, "stale").unwrap();
    std::fs::set_permissions(&old_tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
    ring.save(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    std::fs::remove_file(&old_tmp).unwrap();
    std::os::unix::fs::symlink(&victim, &old_tmp).unwrap();

    // A 0644 key file is replaced by a 0600 one.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    ring.save(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "do not touch");
    assert_eq!(KeyRing::load(&path).unwrap().ids(), vec![1]);

    // No temporary file stays behind.
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with(".tmp")),
        "left behind: {names:?}"
    );

    // save_new: refuses an existing file and a symlink at the name, writes a fresh name.
    assert!(ring.save_new(&path).is_err());
    let link = dir.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    assert!(ring.save_new(&link).is_err());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "do not touch");
    let fresh = dir.join("fresh");
    ring.save_new(&fresh).unwrap();
    assert_eq!(mode(&fresh), 0o600);
}

/// A FIFO in place of a key file or a KEK file is an error naming it, not a wait for a writer
/// on the pipe (before, loading blocked forever), and a file far larger than any key file is
/// refused before it is read.
#[test]
fn a_key_file_that_is_a_fifo_or_huge_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("keys.fifo");
    crate::support::mkfifo(&fifo);
    let path = fifo.clone();
    let (ring, kek) = crate::support::within_20s("loading a key file that is a FIFO", move || {
        (
            KeyRing::load(&path).map(drop),
            walcrypt::KekFile::open(&path).map(drop),
        )
    });
    for err in [ring.unwrap_err(), kek.unwrap_err()] {
        let text = err.to_string();
        assert!(
            text.contains("keys.fifo") && text.contains("not a regular file"),
            "{text}"
        );
    }

    let huge = dir.path().join("keys.huge");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(1 << 30).unwrap();
    let text = KeyRing::load(&huge).unwrap_err().to_string();
    assert!(
        text.contains("keys.huge") && text.contains("more than"),
        "{text}"
    );
}
