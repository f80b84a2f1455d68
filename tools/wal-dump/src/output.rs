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

/// Output for a command whose exit code is its verdict (`--verify`, `--repair`,
/// `--truncate-to`, `--purge-before`): once its reader has gone (`| head` closed the pipe),
/// the rest of the output is dropped instead of ending the command, so the exit code still
/// says what was found, and a change under way is finished rather than cut short. Listings
/// keep ending at a closed pipe: they have no verdict, and the rest would only be read for
/// nothing.
pub struct Verdict<'a> {
    inner: &'a mut dyn Write,
    closed: bool,
}

impl<'a> Verdict<'a> {
    pub fn new(inner: &'a mut dyn Write) -> Verdict<'a> {
        Verdict {
            inner,
            closed: false,
        }
    }
}

impl Write for Verdict<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        match self.inner.write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(buf.len())
            }
            other => other,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match self.inner.flush() {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}
