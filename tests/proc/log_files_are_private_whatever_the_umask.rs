//! The files and directories walcrypt creates are its owner's alone, whatever the umask: under
//! umask 000 (set in a child process that re-executes this test binary) and under the default
//! one, a new log directory is 0700, its segments and `LOCK` 0600, and a key store with its
//! lock file 0600. Under umask 000 they used to be 0777 and 0666.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use walcrypt::{Config, Kek, KeyStore, Mode, Wal};

const DIR_VAR: &str = "WALCRYPT_UMASK_CHILD_DIR";

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Makes a key store and a log (with a rotation, so more segments and a rewritten store)
/// under `root`, which exists.
fn make_files(root: &Path) {
    let store_dir = root.join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let kek = Arc::new(Kek::generate("kek").unwrap());
    let store = Arc::new(KeyStore::create(store_dir.join("keys"), kek).unwrap());
    let wal = Wal::open(
        root.join("a/log"),
        Config::new(Mode::PerRecord).key_store(store),
    )
    .unwrap();
    wal.flush(wal.append(1, b"one").unwrap()).unwrap();
    wal.rotate_data_key().unwrap();
    wal.flush(wal.append(1, b"two").unwrap()).unwrap();
    wal.close().unwrap();
}

fn check_modes(root: &Path) {
    let log = root.join("a/log");
    assert_eq!(mode_of(&root.join("a")), 0o700, "a new parent directory");
    assert_eq!(mode_of(&log), 0o700, "the log directory");
    let mut files = 0;
    for entry in std::fs::read_dir(&log).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode_of(&path), 0o600, "{}", path.display());
        files += 1;
    }
    assert!(files >= 3, "LOCK and at least two segments");
    assert_eq!(mode_of(&log.join("LOCK")), 0o600);
    for entry in std::fs::read_dir(root.join("store")).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode_of(&path), 0o600, "{}", path.display());
    }
}

/// The child: umask 000, then the same files.
#[test]
#[ignore = "run by log_files_are_private_whatever_the_umask as its child"]
fn child_makes_files_under_umask_000() {
    let _serial = crate::support::serial();
    let Some(root) = std::env::var_os(DIR_VAR) else {
        return;
    };
    // SAFETY (test only): umask(2) has no memory effects; this process is the child alone.
    unsafe { libc::umask(0) };
    make_files(Path::new(&root));
}

#[test]
fn log_files_are_private_whatever_the_umask() {
    let _serial = crate::support::serial();
    let default = tempfile::tempdir().unwrap();
    make_files(default.path());
    check_modes(default.path());

    let open = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "log_files_are_private_whatever_the_umask::child_makes_files_under_umask_000",
            "--ignored",
            "--quiet",
        ])
        .env(DIR_VAR, open.path())
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    check_modes(open.path());
}
