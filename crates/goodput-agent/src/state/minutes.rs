//! Background streams kept as summaries. STAMP's per minute: while a
//! background STAMP run goes on, each minute's packets (by their send
//! time) are counted and their round-trip delays kept in an HdrHistogram;
//! when a minute is complete it is stored as one row (kind `stamp_minute`,
//! id `RUN/minute/START_MS`) with its figures and its histogram (V2,
//! deflated, base64: mergeable into hours or days without the packets).
//! Nothing is stored per packet. A continuous OWAMP stream's summaries
//! (one per session of `summary_every` packets, as powstream's) are
//! stored as they come, each direction on its own ([`Summaries`]).

use std::collections::BTreeMap;

use goodput_archive::{Figures, Run, RunState};
use goodput_core::result::{ConnectionRecord, Interval, OneWaySummary, StampPacket, StampPacketStatus};
use goodput_core::stamp::stats::encode_histogram;
use goodput_engine::Observer;
use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use crate::state::booking::Booked;

const MINUTE_MS: u64 = 60_000;

/// One minute's packets.
struct Minute {
    sent: u64,
    received: u64,
    reordered: u64,
    lost: u64,
    /// Planned but never sent (a refused send): lost measurements.
    not_sent: u64,
    duplicates: u64,
    late: u64,
    /// Round-trip delays, microseconds.
    rtt_us: Histogram<u64>,
}

impl Minute {
    fn new() -> Self {
        Self {
            sent: 0,
            received: 0,
            reordered: 0,
            lost: 0,
            not_sent: 0,
            duplicates: 0,
            late: 0,
            // Microseconds, 2 significant digits (quantiles within 1%),
            // grown to the largest delay seen: a minute of loopback
            // delays takes about 6 KB. Sized for an hour up front at 3
            // digits it took 188 KB, and every stream keeps one or two
            // minutes open.
            rtt_us: Histogram::new(2).expect("2 significant digits is valid"),
        }
    }
}

/// The observer a background STAMP run reports its packets to.
pub(crate) struct Minutes {
    run: Booked,
    open: BTreeMap<u64, Minute>,
    out: mpsc::Sender<Run>,
    /// Minutes before this are stored and closed.
    closed_before: u64,
    /// Summaries the store could not take in time (counted, never silent).
    pub(crate) dropped: u64,
    /// Packet fates that came after their minute was stored (a timeout
    /// longer than a minute); counted, not added to a stored minute.
    pub(crate) after_close: u64,
}

/// Summaries queued for the archive at most.
pub(crate) const QUEUE: usize = 64;

impl Minutes {
    pub(crate) fn new(run: Booked, out: mpsc::Sender<Run>) -> Self {
        Self {
            run,
            open: BTreeMap::new(),
            out,
            closed_before: 0,
            dropped: 0,
            after_close: 0,
        }
    }

    /// Stores every minute that started before `before` (ms).
    fn flush_before(&mut self, before: u64) {
        self.closed_before = self.closed_before.max(before);
        let later = self.open.split_off(&before);
        let done = std::mem::replace(&mut self.open, later);
        for (start, m) in done {
            let row = summary(&self.run, start, &m);
            if self.out.try_send(row).is_err() {
                self.dropped += 1;
            }
        }
    }

    /// Stores what is left (the run ended).
    pub(crate) fn finish(&mut self) {
        self.flush_before(u64::MAX);
    }
}

/// The archive row of one minute.
/// The kind of a per-minute summary row.
pub(crate) const KIND: &str = "stamp_minute";

fn summary(run: &Booked, start: u64, m: &Minute) -> Run {
    let mut r = run.record(RunState::Finished, None);
    r.id = format!("{}/minute/{start}", run.id);
    r.kind = KIND.into();
    r.scheduled_ms = start;
    r.start_ms = Some(start);
    r.end_ms = Some(start + MINUTE_MS);
    r.measurement_key = format!("{}/minute", r.measurement_key);
    let q = |p: f64| (!m.rtt_us.is_empty()).then(|| m.rtt_us.value_at_quantile(p) as f64);
    // Of the packets planned: one that could not be sent is lost too.
    let planned = m.sent + m.not_sent;
    let loss = (planned > 0).then(|| (m.lost + m.not_sent) as f64 * 100.0 / planned as f64);
    r.figures = Figures {
        loss_pct: loss,
        // A minute's loss is not split by direction: the round trip's
        // counts as the measuring host's direction.
        loss_forward_pct: loss,
        duplicates: Some(m.duplicates as f64),
        reordered: Some(m.reordered as f64),
        delay_min_us: (!m.rtt_us.is_empty()).then(|| m.rtt_us.min() as f64),
        delay_median_us: q(0.5),
        delay_p95_us: q(0.95),
        delay_max_us: (!m.rtt_us.is_empty()).then(|| m.rtt_us.max() as f64),
        ..Figures::default()
    };
    r.result = Some(serde_json::json!({
        "minute_start_ms": start,
        "sent": m.sent,
        "received": m.received + m.reordered,
        "reordered": m.reordered,
        "lost": m.lost,
        "not_sent": m.not_sent,
        "duplicates": m.duplicates,
        "late": m.late,
        "rtt_us_histogram": encode_histogram(&m.rtt_us),
    }));
    r
}

impl Observer for Minutes {
    fn on_interval(&mut self, _interval: &Interval) {}
    fn on_connection(&mut self, _record: &ConnectionRecord) {}

    fn wants_packets(&self) -> bool {
        true
    }

    fn on_packet(&mut self, p: &StampPacket) {
        let t1_ms = (p.t1_ns.max(0) / 1_000_000) as u64;
        let start = t1_ms / MINUTE_MS * MINUTE_MS;
        if start < self.closed_before {
            self.after_close += 1;
            return;
        }
        let m = self.open.entry(start).or_insert_with(Minute::new);
        match p.status {
            StampPacketStatus::Received | StampPacketStatus::Reordered | StampPacketStatus::Lost => {
                m.sent += 1
            }
            _ => {}
        }
        match p.status {
            StampPacketStatus::Received => m.received += 1,
            StampPacketStatus::Reordered => m.reordered += 1,
            StampPacketStatus::Lost => m.lost += 1,
            StampPacketStatus::Duplicate => m.duplicates += 1,
            StampPacketStatus::Late => m.late += 1,
            StampPacketStatus::NotSent => m.not_sent += 1,
        }
        if matches!(
            p.status,
            StampPacketStatus::Received | StampPacketStatus::Reordered
        ) {
            if let Some(rtt) = p.rtt_us {
                // At most an hour (a reply is matched within its timeout).
                let _ = m.rtt_us.record(rtt.clamp(1.0, 3.6e9) as u64);
            }
        }
        // A packet's fate is known within its timeout, far less than a
        // minute: the minute before the last one seen is complete.
        self.flush_before(start.saturating_sub(MINUTE_MS));
    }
}

/// The kind of a continuous OWAMP stream's summary row.
pub(crate) const SUMMARY_KIND: &str = "owamp_summary";

/// The observer a continuous OWAMP stream (powstream's) reports its
/// summaries to: each becomes one row (kind `owamp_summary`, id
/// `RUN/summary/to|from/START_MS`) with its figures in the direction's
/// columns and its histogram, as each minute of a STAMP stream is.
pub(crate) struct Summaries {
    run: Booked,
    out: mpsc::Sender<Run>,
    /// Summaries the store could not take in time (counted, never silent).
    pub(crate) dropped: u64,
}

impl Summaries {
    pub(crate) fn new(run: Booked, out: mpsc::Sender<Run>) -> Self {
        Self { run, out, dropped: 0 }
    }
}

fn one_way_row(run: &Booked, to_server: bool, s: &OneWaySummary) -> Run {
    let way = if to_server { "to" } else { "from" };
    let start = (s.start_ns.max(0) / 1_000_000) as u64;
    let end = (s.end_ns.max(0) / 1_000_000) as u64;
    let mut r = run.record(RunState::Finished, None);
    r.id = format!("{}/summary/{way}/{start}", run.id);
    r.kind = SUMMARY_KIND.into();
    r.scheduled_ms = start;
    r.start_ms = Some(start);
    r.end_ms = Some(end.max(start));
    r.measurement_key = format!("{}/summary/{way}", r.measurement_key);
    r.figures = goodput_archive::one_way_summary_figures(s, to_server);
    r.result = serde_json::to_value(s).ok();
    r
}

impl Observer for Summaries {
    fn on_interval(&mut self, _interval: &Interval) {}
    fn on_connection(&mut self, _record: &ConnectionRecord) {}

    fn on_one_way_summary(&mut self, to_server: bool, s: &OneWaySummary) {
        if self.out.try_send(one_way_row(&self.run, to_server, s)).is_err() {
            self.dropped += 1;
        }
    }
}
