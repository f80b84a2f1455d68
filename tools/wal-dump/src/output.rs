//! Results that are one JSON object (`--stats`, `--verify`, `--repair`, `--truncate-to`,
//! `--purge-before` with `--format json`).

use std::io::Write;

use serde::Serialize;

use crate::fail::Fail;

/// One JSON object on its own line.
pub fn write_json(out: &mut dyn Write, value: &impl Serialize) -> Result<(), Fail> {
    serde_json::to_writer(&mut *out, value).map_err(|e| match e.io_error_kind() {
        Some(_) => Fail::from(std::io::Error::from(e)),
        None => Fail::trouble(format!("write output: {e}")),
    })?;
    writeln!(out)?;
    Ok(())
}
