//! The command KEK provider runs a program without a shell and takes the KEK it prints; a
//! failing, hanging, missing or babbling program is an error that names the program and never
//! repeats its output; the KEK it prints opens the same store as the KEK file it came from.
//! The timeout bounds the whole exchange, also when a process the program started keeps its
//! output open, and that process is killed with it. Only 64 hex digits or base64 of 32 bytes
//! are a KEK, unless the caller chose raw output: 32 hex digits (a 128-bit key) or a
//! 32-character passphrase are refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use walcrypt::{Error, KekCommand, KekFile, KekFormat, KeyProvider, KeyStore};

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    path
}

fn provider_error(r: walcrypt::Result<walcrypt::Kek>) -> (String, String) {
    match r {
        Err(Error::KeyProvider { provider, reason }) => (provider, reason),
        Err(other) => panic!("expected a provider error, got {other}"),
        Ok(_) => panic!("expected a provider error, got a KEK"),
    }
}

#[test]
fn kek_command_provider() {
    let _serial = crate::support::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let kek_file = dir.join("kek");
    let from_file = KekFile::create(&kek_file).unwrap();
    let hex = std::fs::read_to_string(&kek_file).unwrap();
    let hex = hex.trim();
    let t = Duration::from_secs(10);

    // Prints the KEK: the same KEK as the file (same fingerprint), so it opens the file's store.
    let good = script(dir, "good", &format!("cat '{}'", kek_file.display()));
    let kek = KekCommand::run(&good, &[], t).unwrap();
    assert_eq!(kek.fingerprint(), from_file.fingerprint());
    let store_path = dir.join("store");
    KeyStore::create(&store_path, Arc::new(from_file)).unwrap();
    let store = KeyStore::open(&store_path, Arc::new(kek)).unwrap();
    assert_eq!(store.keys().len(), 1);

    // Arguments reach the program verbatim: no shell expands or splits them.
    let echo = script(
        dir,
        "echo-args",
        &format!(
            "[ \"$#\" = 2 ] && [ \"$1\" = '$(touch pwned); x' ] && cat '{}'",
            kek_file.display()
        ),
    );
    let args = vec!["$(touch pwned); x".to_string(), "*".to_string()];
    let kek = KekCommand::run(&echo, &args, t).unwrap();
    assert_eq!(kek.kek_id().unwrap(), store.kek_id());
    assert!(!Path::new("pwned").exists() && !dir.join("pwned").exists());

    // Fails after printing the key: an error naming the program, without the output.
    let fails = script(
        dir,
        "fails",
        &format!("cat '{}'; echo oops >&2; exit 3", kek_file.display()),
    );
    let (who, why) = provider_error(KekCommand::run(&fails, &[], t));
    assert!(who.contains("fails"), "{who}");
    assert!(why.contains('3'), "{why}");
    assert!(
        !why.contains(hex) && !why.contains(&hex[..16]) && !why.contains("oops"),
        "{why}"
    );

    // Garbage: said to be unusable, never quoted.
    let babble = script(dir, "babble", "echo 'password=hunter2 token=s3cr3t'");
    let (_, why) = provider_error(KekCommand::run(&babble, &[], t));
    assert!(why.contains("unusable output"), "{why}");
    assert!(!why.contains("hunter2") && !why.contains("s3cr3t"), "{why}");

    // Hangs: killed at the timeout, and the error says so.
    let hangs = script(dir, "hangs", "sleep 30");
    let started = Instant::now();
    let (_, why) = provider_error(KekCommand::run(&hangs, &[], Duration::from_millis(200)));
    assert!(why.contains("did not finish within 200 ms"), "{why}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the command was not killed"
    );

    // Missing program.
    let (who, why) = provider_error(KekCommand::run(dir.join("nope"), &[], t));
    assert!(
        who.contains("nope") && why.contains("cannot start"),
        "{who}: {why}"
    );

    // A KEK of the wrong length (31 bytes of hex).
    let short = script(dir, "short", &format!("echo {}", &hex[..62]));
    let (_, why) = provider_error(KekCommand::run(&short, &[], t));
    assert!(!why.contains(&hex[..16]), "{why}");

    // A grandchild that keeps the output open: the call returns at the timeout, not when the
    // grandchild ends, and the grandchild is killed with the program's process group.
    let pid_file = dir.join("grandchild.pid");
    let lingers = script(
        dir,
        "lingers",
        &format!(
            "cat '{}'\nsh -c 'echo $$ > {}; exec sleep 10' &\nexit 0",
            kek_file.display(),
            pid_file.display()
        ),
    );
    let started = Instant::now();
    let (_, why) = provider_error(KekCommand::run(&lingers, &[], Duration::from_millis(500)));
    let took = started.elapsed();
    assert!(why.contains("did not finish within 500 ms"), "{why}");
    assert!(
        took < Duration::from_millis(3500),
        "returned after {took:?}"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let pid = pid.trim();
    let gone = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // Killed but not yet reaped by whoever inherited it.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    };
    let waited = Instant::now();
    while !gone() && waited.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone(), "the grandchild {pid} survived");

    // Thirty-two characters are not a 256-bit KEK in the default format: a 128-bit key in hex,
    // a passphrase. Neither is echoed.
    for (name, text) in [
        ("hex128", hex[..32].to_string()),
        ("passphrase", "correct horse battery staple!!!!".to_string()),
    ] {
        assert_eq!(text.len(), 32);
        let prints = script(dir, name, &format!("printf '%s' '{text}'"));
        let (_, why) = provider_error(KekCommand::run(&prints, &[], t));
        assert!(why.contains("unusable output"), "{name}: {why}");
        assert!(!why.contains(&text[..8]), "{name}: {why}");
        // Nor in the raw format: 32 bytes of text are not a random key there either.
        let (_, why) = provider_error(KekCommand::run_with_format(&prints, &[], t, KekFormat::Raw));
        assert!(why.contains("not a random key"), "{name}: {why}");
    }
    // The raw format, chosen explicitly, takes 32 bytes that are not all text.
    let binary = script(
        dir,
        "binary",
        "printf '\\001\\377%s' 'correct horse battery staple'xx",
    );
    assert!(KekCommand::run_with_format(&binary, &[], t, KekFormat::Raw).is_ok());

    // Base64 of the 32 bytes is the same KEK as the hex.
    let b64 = script(
        dir,
        "base64",
        &format!("printf '%s' '{hex}' | xxd -r -p | base64"),
    );
    if std::process::Command::new("xxd").arg("-v").output().is_ok() {
        let kek = KekCommand::run(&b64, &[], t).unwrap();
        assert_eq!(kek.kek_id().unwrap(), store.kek_id());
    }
}
