//! `--stats`: records per kind, where the log's bytes go, and what encryption costs in headers.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use walcrypt::inspect::{
    self, PAGE_FLAG_ENCRYPTED, PAGE_HEADER_LEN, RECORD_HEADER_ENCRYPTED, RECORD_HEADER_PLAIN,
};
use walcrypt::{Lsn, Mode, Reader};

use crate::Args;
use crate::fail::{EXIT_OK, Fail};
use crate::source::{Disk, Target, fmt_lsn, open_target};

#[derive(Default, Clone, Copy)]
struct KindStats {
    count: u64,
    payload: u64,
    header: u64,
}

pub fn run(args: &Args, out: &mut dyn Write) -> Result<u8, Fail> {
    let (keys, target, reader) = open_target(
        args.key_file.as_deref(),
        &args.kek,
        &args.path,
        args.require_mode,
    )?;
    let mut disk = Disk::new(&reader);
    let (from, to) = target.range(&reader, args.start, args.end);
    write_overview(&reader, &target, out)?;
    if reader.mode() == Mode::PageLevel && keys.is_none() {
        writeln!(
            out,
            "records:            pagelevel pages are encrypted; pass --key-file to count records"
        )?;
        let ids = page_key_ids(&reader, from, to)?;
        writeln!(out, "key ids in pages:   {}", join(&ids))?;
        return Ok(EXIT_OK);
    }
    let mut kinds: BTreeMap<u8, KindStats> = BTreeMap::new();
    let mut record_keys = BTreeSet::new();
    let mut first: Option<u64> = None;
    let mut last_end = 0u64;
    let mut counted = 0u64;
    let begin = disk.boundary_before(from)?;
    for item in reader.raw_records_from(begin) {
        let rec = item.map_err(|e| Fail::from_wal_with_keys(&e, args.key_file.as_deref()))?;
        let lsn = u64::from(rec.lsn);
        if lsn >= to || args.limit.is_some_and(|l| counted >= l) {
            break;
        }
        if lsn < from || !(args.kinds.is_empty() || args.kinds.contains(&rec.header.kind)) {
            continue;
        }
        let k = kinds.entry(rec.header.kind).or_default();
        k.count += 1;
        k.payload += rec.header.len as u64;
        k.header += rec.header.len_bytes() as u64;
        if let Some((id, _)) = rec.header.encryption {
            record_keys.insert(id);
        }
        first.get_or_insert(lsn);
        last_end = rec.end_lsn.into();
        counted += 1;
    }
    let Some(first) = first else {
        writeln!(out, "records:            0")?;
        return Ok(EXIT_OK);
    };
    writeln!(
        out,
        "lsn range:          {} .. {} (first record .. end of the last)",
        fmt_lsn(first),
        fmt_lsn(last_end)
    )?;
    let used_keys = match reader.mode() {
        Mode::PerRecord | Mode::PerRecordGcm => record_keys.into_iter().collect(),
        Mode::PageLevel => page_key_ids(&reader, first, last_end)?,
        Mode::Plaintext => Vec::new(),
    };
    writeln!(out, "key ids in use:     {}", join(&used_keys))?;
    writeln!(out, "records:            {counted}")?;
    writeln!(out)?;
    let total = write_kind_table(&kinds, out)?;
    writeln!(out)?;
    write_breakdown(&reader, first, last_end, total, out)
}

fn write_overview(reader: &Reader, target: &Target, out: &mut dyn Write) -> Result<(), Fail> {
    let geo = reader.geometry();
    let segs = reader.segments();
    writeln!(out, "mode:               {}", reader.mode())?;
    let names = |s: &walcrypt::inspect::SegmentInfo| inspect::segment_file_name(s.header.start);
    match (target.segment, segs.first(), segs.last()) {
        (Some(start), _, _) => writeln!(
            out,
            "segments:           1 selected ({}) of {}",
            inspect::segment_file_name(Lsn(start)),
            segs.len()
        )?,
        (None, Some(a), Some(b)) => writeln!(
            out,
            "segments:           {} ({} .. {})",
            segs.len(),
            names(a),
            names(b)
        )?,
        _ => writeln!(out, "segments:           0")?,
    }
    writeln!(
        out,
        "geometry:           page {} B, segment {} B",
        geo.page_size, geo.segment_size
    )?;
    // After an upgrade a log holds segments of an older format version, then of the current.
    let mut versions: BTreeMap<u32, usize> = BTreeMap::new();
    for s in segs {
        *versions.entry(s.header.version).or_default() += 1;
    }
    let versions: Vec<String> = versions
        .iter()
        .map(|(v, n)| format!("{v} ({n} segment{})", if *n == 1 { "" } else { "s" }))
        .collect();
    writeln!(out, "format versions:    {}", versions.join(", "))?;
    let listed: BTreeSet<u32> = segs
        .iter()
        .flat_map(|s| s.header.key_checks.iter().map(|(id, _)| *id))
        .collect();
    writeln!(
        out,
        "key ids listed:     {} (check values in segment headers)",
        join(&listed.into_iter().collect::<Vec<_>>())
    )?;
    Ok(())
}

/// Key ids of the encrypted page headers in `[from, to)`.
fn page_key_ids(reader: &Reader, from: u64, to: u64) -> Result<Vec<u32>, Fail> {
    let first_page = reader.geometry().page_start(from);
    let ids: BTreeSet<u32> = reader
        .page_headers()?
        .into_iter()
        .filter(|p| (first_page..to).contains(&u64::from(p.page_lsn)))
        .filter_map(|p| p.header)
        .filter(|h| h.flags & PAGE_FLAG_ENCRYPTED != 0)
        .map(|h| h.key_id)
        .collect();
    Ok(ids.into_iter().collect())
}

fn write_kind_table(
    kinds: &BTreeMap<u8, KindStats>,
    out: &mut dyn Write,
) -> Result<KindStats, Fail> {
    let mut total = KindStats::default();
    for k in kinds.values() {
        total.count += k.count;
        total.payload += k.payload;
        total.header += k.header;
    }
    let all = (total.payload + total.header).max(1) as f64;
    writeln!(
        out,
        "{:>5} {:>10} {:>14} {:>12} {:>8}",
        "kind", "count", "payload B", "header B", "share"
    )?;
    for (kind, k) in kinds {
        writeln!(
            out,
            "{:>5} {:>10} {:>14} {:>12} {:>7.2}%",
            kind,
            k.count,
            k.payload,
            k.header,
            100.0 * (k.payload + k.header) as f64 / all
        )?;
    }
    writeln!(
        out,
        "{:>5} {:>10} {:>14} {:>12} {:>7.2}%",
        "total", total.count, total.payload, total.header, 100.0
    )?;
    Ok(total)
}

/// Where the bytes between the start of the first record's segment and the end of the last
/// record go, and the part of them that encryption adds to headers.
fn write_breakdown(
    reader: &Reader,
    first: u64,
    end: u64,
    total: KindStats,
    out: &mut dyn Write,
) -> Result<u8, Fail> {
    let geo = reader.geometry();
    let span_start = geo.segment_start(first);
    let log_bytes = end - span_start;
    let pages = log_bytes.div_ceil(geo.page_size);
    let header_pages = (geo.segment_start(end.saturating_sub(1).max(span_start)) - span_start)
        / geo.segment_size
        + 1;
    let page_headers = (pages.saturating_sub(header_pages)) * PAGE_HEADER_LEN as u64;
    let segment_headers = header_pages * geo.page_size;
    let other =
        log_bytes.saturating_sub(total.payload + total.header + page_headers + segment_headers);
    let pct = |n: u64| 100.0 * n as f64 / log_bytes.max(1) as f64;
    writeln!(
        out,
        "log bytes:          {log_bytes} ({} .. {})",
        fmt_lsn(span_start),
        fmt_lsn(end)
    )?;
    let rows = [
        ("payload", total.payload, String::new()),
        (
            "record headers",
            total.header,
            format!("{} records", total.count),
        ),
        (
            "page headers",
            page_headers,
            format!("{} pages x {PAGE_HEADER_LEN} B", pages - header_pages),
        ),
        (
            "segment headers",
            segment_headers,
            format!("{header_pages} header pages x {} B", geo.page_size),
        ),
        (
            "other",
            other,
            "unused page tails, segment switches, filtered records".to_string(),
        ),
    ];
    for (what, n, note) in rows {
        let line = format!("  {what:<17} {n:>12} {:>7.2}%  {note}", pct(n));
        writeln!(out, "{}", line.trim_end())?;
    }
    let extra = (RECORD_HEADER_ENCRYPTED - RECORD_HEADER_PLAIN) as u64;
    let (overhead, why) = match reader.mode() {
        Mode::PerRecordGcm => (
            total.count * (extra + walcrypt::inspect::TAG_LEN as u64),
            format!(
                "{extra} B more per record header ({RECORD_HEADER_ENCRYPTED} B instead of \
                 {RECORD_HEADER_PLAIN} B) and a {} B tag per record",
                walcrypt::inspect::TAG_LEN
            ),
        ),
        Mode::PerRecord => (
            total.count * extra,
            format!(
                "{extra} B more per record header ({RECORD_HEADER_ENCRYPTED} B instead of \
                 {RECORD_HEADER_PLAIN} B)"
            ),
        ),
        Mode::PageLevel => (
            0,
            format!(
                "key id and IV live in the {PAGE_HEADER_LEN} B page header, the same size \
                 in every mode"
            ),
        ),
        Mode::Plaintext => (0, "not encrypted".to_string()),
    };
    writeln!(
        out,
        "encryption header overhead: {overhead} B = {:.2}% of the log ({why})",
        pct(overhead)
    )?;
    Ok(EXIT_OK)
}

fn join(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
