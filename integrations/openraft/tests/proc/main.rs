//! The openraft log store's tests that need processes of their own: they re-execute this test
//! binary as a child, by test name (`<module>::<test>`), and SIGKILL it. One module per
//! scenario; shared helpers are in `tests/support/`; every in-process scenario is in
//! `tests/it/`. Each test here holds `support::serial()` for its whole run, so none sees
//! another's children or the log locks they inherited.
//!
//! Run one with `cargo test -p walcrypt-openraft --test proc <module>::`.

#[path = "../support/mod.rs"]
mod support;

mod sigkill_while_appending;
