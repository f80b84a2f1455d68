//! wal-key creates (0600, never overwriting), rotates and lists key rings without ever printing
//! key bytes, and its rings decrypt logs in wal-dump. Every command answers in JSON with
//! `--format json`; a KEK file given as keys is named as one; a check against a plaintext log
//! says it checked nothing.

use crate::support;

use std::os::unix::fs::PermissionsExt;

use support::*;
use walcrypt::{KeyRing, Mode};

fn key_hex(file: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

#[test]
fn wal_key_manages_rings() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ring");
    let o = wal_key(&[&"new", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let mut printed = stdout(&o) + &stderr(&o);

    assert_fails(&wal_key(&[&"new", &file]), 2, "refusing to overwrite");

    let o = wal_key(&[&"rotate", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    printed += &(stdout(&o) + &stderr(&o));

    let o = wal_key(&[&"list", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let list = stdout(&o);
    printed += &(list.clone() + &stderr(&o));
    let ring = KeyRing::load(&file).unwrap();
    assert_eq!(ring.ids(), vec![1, 2]);
    for id in [1, 2] {
        let kcv = hex(&ring.get(id).unwrap().fingerprint());
        assert!(
            list.lines()
                .any(|l| l.trim_start().starts_with(&id.to_string()) && l.contains(&kcv)),
            "{list}"
        );
    }
    assert!(
        list.lines()
            .any(|l| l.trim_start().starts_with('2') && l.contains("active")),
        "{list}"
    );

    // A log written with the ring reads back through wal-dump.
    let log = tmp.path().join("log");
    let appended = append(&log, Mode::PerRecord, &ring, 0, 20);
    let o = wal_dump(&[&"--key-file", &file, &"--payload", &"hex", &log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dump = stdout(&o);
    assert!(dump.contains(&hex(&appended[3].payload)));
    printed += &(dump + &stderr(&o));

    for key in key_hex(&file) {
        assert_eq!(key.len(), 64);
        assert!(!printed.contains(&key), "key bytes printed");
        assert!(!printed.contains(&key[..16]), "part of a key printed");
    }

    assert_fails(&wal_key(&[&"list", &tmp.path().join("nope")]), 2, "nope");
}

/// Runs wal-key with `--format json`, expecting exit 0 and one JSON object.
fn json(args: &[&dyn AsRef<std::ffi::OsStr>]) -> serde_json::Value {
    let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = args.to_vec();
    all.push(&"--format");
    all.push(&"json");
    let o = wal_key(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("one JSON object")
}

#[test]
fn wal_key_answers_in_json_for_every_command_and_never_with_key_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (ring, kek, store) = (
        tmp.path().join("ring"),
        tmp.path().join("kek"),
        tmp.path().join("store"),
    );
    let mut printed = String::new();
    let new = json(&[&"new", &ring]);
    assert_eq!(
        (new["command"].as_str(), new["kind"].as_str()),
        (Some("new"), Some("key_ring"))
    );
    let rotated = json(&[&"rotate", &ring]);
    assert_eq!(rotated["added_key_id"], 2, "{rotated}");
    let list = json(&[&"list", &ring]);
    let keys = KeyRing::load(&ring).unwrap();
    assert_eq!(list["active_key_id"], 2, "{list}");
    for (entry, id) in list["keys"].as_array().unwrap().iter().zip([1u32, 2]) {
        assert_eq!(entry["id"], id, "{list}");
        assert_eq!(
            entry["fingerprint"],
            hex(&keys.get(id).unwrap().fingerprint())
        );
    }
    let verified = json(&[&"verify", &ring]);
    assert_eq!(
        (verified["result"].as_str(), verified["key_count"].as_u64()),
        (Some("ok"), Some(2)),
        "{verified}"
    );
    let kek_new = json(&[&"kek-new", &kek]);
    assert!(
        kek_new["kek"].as_str().unwrap().starts_with("sha256:"),
        "{kek_new}"
    );
    let wrapped = json(&[&"wrap", &ring, &store, &"--kek-file", &kek]);
    assert_eq!(wrapped["kind"], "key_store", "{wrapped}");
    assert_eq!(wrapped["keys"].as_array().unwrap().len(), 2, "{wrapped}");
    let init = json(&[&"init", &tmp.path().join("store2"), &"--kek-file", &kek]);
    assert!(init["generation"].as_u64().is_some(), "{init}");
    let listed = json(&[&"list", &store]);
    assert!(listed["keys"][0]["created_utc"].is_string(), "{listed}");
    let rotated = json(&[&"rotate", &store, &"--kek-file", &kek]);
    assert_eq!(rotated["added_key_id"], 3, "{rotated}");
    let kek2 = tmp.path().join("kek2");
    json(&[&"kek-new", &kek2]);
    let rekeyed = json(&[
        &"rotate-kek",
        &store,
        &"--kek-file",
        &kek,
        &"--new-kek-file",
        &kek2,
    ]);
    assert_eq!(rekeyed["key_count"], 3, "{rekeyed}");
    assert_ne!(rekeyed["kek"], rekeyed["old_kek"], "{rekeyed}");
    let verified = json(&[&"verify", &store, &"--kek-file", &kek2]);
    assert_eq!(verified["kind"], "key_store", "{verified}");
    for v in [new, rotated, list, verified, wrapped, init, listed, rekeyed] {
        printed += &v.to_string();
    }
    for key in key_hex(&ring) {
        assert!(!printed.contains(&key[..16]), "part of a key printed");
    }
}

#[test]
fn wal_key_names_a_kek_file_given_where_keys_belong_and_counts_in_the_singular() {
    let tmp = tempfile::tempdir().unwrap();
    let kek = tmp.path().join("kek");
    let ring = tmp.path().join("ring");
    assert_eq!(wal_key(&[&"kek-new", &kek]).status.code(), Some(0));
    for command in ["list", "verify", "rotate"] {
        assert_fails(
            &wal_key(&[&command, &kek]),
            2,
            "is a KEK file, not a key store or key ring",
        );
    }
    assert_eq!(wal_key(&[&"new", &ring]).status.code(), Some(0));
    let o = wal_key(&[&"verify", &ring]);
    assert!(stdout(&o).contains(": 1 key parses"), "{}", stdout(&o));
}

#[test]
fn wal_key_verify_against_a_plaintext_log_says_nothing_was_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, _, _) = make_log(tmp.path(), Mode::Plaintext, 20);
    let o = wal_key(&[&"verify", &key_file, &"--log", &log]);
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("nothing checked"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("every key"), "{}", stdout(&o));
    let o = wal_key(&[&"verify", &key_file, &"--log", &log, &"--format", &"json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["result"], "nothing_checked", "{v}");
    assert_eq!(v["log_mode"], "plaintext", "{v}");
}

#[test]
fn wal_key_list_wal_key_verify_and_wal_dump_show_the_same_fingerprint_for_the_same_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (log, key_file, keys, _) = make_log(tmp.path(), Mode::PerRecord, 20);
    let fp = hex(&keys.get(1).unwrap().fingerprint());
    let listed = json(&[&"list", &key_file]);
    assert_eq!(listed["keys"][0]["fingerprint"], fp.as_str(), "{listed}");
    let o = wal_key(&[&"list", &key_file]);
    assert!(stdout(&o).contains(&fp), "{}", stdout(&o));

    let verified = json(&[&"verify", &key_file, &"--log", &log]);
    assert_eq!(
        verified["keys"][0]["fingerprint"],
        fp.as_str(),
        "{verified}"
    );
    assert_eq!(verified["log_keys"][0]["id"], 1, "{verified}");
    assert_eq!(
        verified["log_keys"][0]["fingerprint"],
        fp.as_str(),
        "{verified}"
    );
    let o = wal_key(&[&"verify", &key_file, &"--log", &log]);
    assert!(
        stdout(&o).contains(&format!("uses key id 1, fingerprint {fp}")),
        "{}",
        stdout(&o)
    );

    let o = wal_dump(&[&"--verify", &"--key-file", &key_file, &log]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("key checked: key id 1, fingerprint {fp}: matches")),
        "{}",
        stdout(&o)
    );
    let o = wal_dump(&[
        &"--verify",
        &"--format",
        &"json",
        &"--key-file",
        &key_file,
        &log,
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["keys_checked"][0]["id"], 1, "{v}");
    assert_eq!(v["keys_checked"][0]["fingerprint"], fp.as_str(), "{v}");
    assert_eq!(v["keys_checked"][0]["result"], "match", "{v}");

    let o = wal_dump(&[&"--stats", &"--key-file", &key_file, &log]);
    assert!(
        stdout(&o).contains(&format!("keys in use:        key id 1, fingerprint {fp}")),
        "{}",
        stdout(&o)
    );
    let o = wal_dump(&[
        &"--stats",
        &"--format",
        &"json",
        &"--key-file",
        &key_file,
        &log,
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["keys_in_use"][0]["fingerprint"], fp.as_str(), "{v}");
}
