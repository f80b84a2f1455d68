//! What the log tells its [`EventListener`]: segment switches (each at most once, in order),
//! poisonings (poison.rs keeps whether that one was told) and what the open's recovery found.
//! The listener is called with no lock of the log held, at the exits of the public operations.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use crate::Lsn;
use crate::events::{EventListener, RecoverySummary, SegmentSwitch};
use crate::line_ledger::LineU64;

pub(super) struct Reports {
    listener: Option<Arc<dyn EventListener>>,
    /// Start of the newest segment reported to the listener.
    reported_segment: LineU64,
    /// What the open that made this `Wal` found.
    recovery: OnceLock<RecoverySummary>,
}

impl Reports {
    /// Reports for a log whose writing starts in the segment starting at `segment`.
    pub(super) fn new(listener: Option<Arc<dyn EventListener>>, segment: Lsn) -> Reports {
        Reports {
            listener,
            reported_segment: LineU64::named("reported_segment", segment.0),
            recovery: OnceLock::new(),
        }
    }

    pub(super) fn listener(&self) -> Option<&Arc<dyn EventListener>> {
        self.listener.as_ref()
    }

    /// The switch to report now that writing has reached the segment starting at `segment`,
    /// if no earlier call reported it (or a later one): each switch is reported once, by one
    /// thread. A plain load first, so the read-modify-write happens only at a switch.
    pub(super) fn switch_to(&self, segment: Lsn) -> Option<SegmentSwitch> {
        if segment.0 <= self.reported_segment.load(Ordering::Acquire) {
            return None;
        }
        let reported = self.reported_segment.fetch_max(segment.0, Ordering::AcqRel);
        (segment.0 > reported).then_some(SegmentSwitch {
            from: Lsn(reported),
            to: segment,
        })
    }

    /// Keeps what recovery found and tells the listener.
    pub(super) fn recovered(&self, summary: RecoverySummary) {
        if let Some(listener) = &self.listener {
            listener.on_recovery(&summary);
        }
        let _ = self.recovery.set(summary);
    }

    pub(super) fn recovery(&self) -> Option<&RecoverySummary> {
        self.recovery.get()
    }
}
