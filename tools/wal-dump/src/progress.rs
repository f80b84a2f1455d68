//! A progress line on stderr for the passes over a whole log (`--verify`, `--stats`,
//! `--repair`), shown only when stderr is a terminal and only once a pass has run for a second,
//! so small logs, pipes and scripts never see it. The line is erased when the pass ends.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use walcrypt::Lsn;

/// How long a pass runs before its progress shows, and how often the line is redrawn.
const DELAY: Duration = Duration::from_secs(1);
const REDRAW: Duration = Duration::from_millis(250);
/// Records (or pages) between looks at the clock.
const STRIDE: u32 = 4096;

pub struct Progress {
    what: &'static str,
    from: Lsn,
    to: Lsn,
    on: bool,
    started: Instant,
    drawn: Option<Instant>,
    calls: u32,
}

impl Progress {
    /// A pass named `what` over the log positions `[from, to)`.
    pub fn new(what: &'static str, from: Lsn, to: Lsn) -> Progress {
        Progress {
            what,
            from,
            to: to.max(from + 1),
            on: std::io::stderr().is_terminal(),
            started: Instant::now(),
            drawn: None,
            calls: 0,
        }
    }

    /// The pass has reached `lsn`.
    pub fn at(&mut self, lsn: Lsn) {
        if !self.on {
            return;
        }
        self.calls = self.calls.wrapping_add(1);
        if !self.calls.is_multiple_of(STRIDE) || self.started.elapsed() < DELAY {
            return;
        }
        if self.drawn.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        let done = lsn.clamp(self.from, self.to) - self.from;
        let pct = 100.0 * done as f64 / (self.to - self.from) as f64;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[Kwal-dump: {} {pct:5.1}% (lsn {lsn})",
            self.what,
        );
        let _ = err.flush();
        self.drawn = Some(Instant::now());
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.drawn.is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// The log positions a reader covers: from its oldest segment's start to its newest's end.
pub fn span(reader: &walcrypt::Reader) -> (Lsn, Lsn) {
    let segs = reader.segments();
    let first = segs.first().map_or(Lsn(0), |s| s.header.start);
    let last = segs
        .last()
        .map_or(Lsn(0), |s| s.header.start + reader.geometry().segment_size);
    (first, last)
}
