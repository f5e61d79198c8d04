//! Media-stream figures for one stream or many: the receiver's counts (or
//! a peer's report of them) and the sender's, into the result model.

use super::receiver::{MediaCounts, MediaReceiver};
use super::wire::Report;
use crate::result::{MediaHistograms, MediaStats, SendFailure};
use crate::stamp::stats::SignedHistogram;

/// Adds up streams.
#[derive(Debug, Default)]
pub struct MediaTotals {
    counts: MediaCounts,
    lost: u64,
    sent: Option<u64>,
    send_errors: Option<u64>,
    send_failures: Vec<SendFailure>,
    received_bytes: Option<u64>,
    extent_measured: bool,
    jitter_sum_ns: f64,
    jitter_n: u64,
    /// Delay relative to each stream's first datagram.
    pub delay: SignedHistogram,
    /// IPDV of consecutive datagrams.
    pub ipdv: SignedHistogram,
}

fn add_opt(into: &mut Option<u64>, v: u64) {
    *into = Some(into.unwrap_or(0) + v);
}

fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

impl MediaTotals {
    /// Adds a stream we received: `sent` and `send_errors` from its End
    /// message when heard.
    pub fn add_receiver(
        &mut self,
        rx: &MediaReceiver,
        sent: Option<u64>,
        send_errors: Option<u64>,
        received_bytes: u64,
    ) {
        let c = rx.counts;
        self.add_counts(&c);
        let sent_or_seen = sent.unwrap_or_else(|| rx.highest_seq().map_or(0, |h| h + 1));
        self.lost += rx.lost(sent_or_seen);
        if let Some(s) = sent {
            add_opt(&mut self.sent, s);
        }
        if let Some(e) = send_errors {
            add_opt(&mut self.send_errors, e);
        }
        add_opt(&mut self.received_bytes, received_bytes);
        self.extent_measured = true;
        self.jitter_sum_ns += rx.jitter_ns();
        self.jitter_n += 1;
        self.delay.merge(&rx.transit);
        self.ipdv.merge(&rx.ipdv);
    }

    /// Adds a stream we sent: our own counts (`failures`: the refused
    /// sends by reason) and, when it came, the receiver's report of its own.
    pub fn add_sender(
        &mut self,
        sent: u64,
        send_errors: u64,
        failures: &[SendFailure],
        report: Option<&Report>,
    ) {
        add_opt(&mut self.sent, sent);
        add_opt(&mut self.send_errors, send_errors);
        SendFailure::merge(&mut self.send_failures, failures);
        if let Some(r) = report {
            self.add_counts(&MediaCounts {
                received: r.received,
                duplicates: r.duplicates,
                reordered: r.reordered,
                extent_sum: 0,
                extent_max: 0,
                late: r.late,
                errors: r.errors,
                corrupt: r.corrupt,
                completed: u64::from(r.completed),
                dropped: u64::from(r.dropped),
                repeated: u64::from(r.repeated),
            });
            self.jitter_sum_ns += r.jitter_ns as f64;
            self.jitter_n += 1;
        }
        // Lost by our count of what left, not the receiver's guess.
        self.lost += sent.saturating_sub(report.map_or(0, |r| r.received));
    }

    fn add_counts(&mut self, c: &MediaCounts) {
        let t = &mut self.counts;
        t.received += c.received;
        t.duplicates += c.duplicates;
        t.reordered += c.reordered;
        t.extent_sum += c.extent_sum;
        t.extent_max = t.extent_max.max(c.extent_max);
        t.late += c.late;
        t.errors += c.errors;
        t.corrupt += c.corrupt;
        t.completed += c.completed;
        t.dropped += c.dropped;
        t.repeated += c.repeated;
    }

    /// Streams added with a jitter figure.
    pub fn streams(&self) -> u64 {
        self.jitter_n
    }

    /// The figures.
    pub fn stats(&self) -> MediaStats {
        let c = &self.counts;
        // Of the datagrams planned: a refused send is a datagram lost. With
        // no count from the sender, the receiver's sequence numbers (which
        // refused sends used too) already counted them in `lost`.
        let refused = self.send_errors.filter(|_| self.sent.is_some()).unwrap_or(0);
        let planned = self
            .sent
            .map_or(c.received + self.lost, |s| s.saturating_add(refused));
        MediaStats {
            sent: self.sent,
            send_errors: self.send_errors,
            send_failures: self.send_failures.clone(),
            received: c.received,
            received_bytes: self.received_bytes,
            lost: self.lost,
            loss_percent: percent(self.lost.saturating_add(refused), planned),
            duplicates: c.duplicates,
            reordered: c.reordered,
            reordered_percent: percent(c.reordered, c.received),
            reorder_extent_mean: self.extent_measured.then(|| {
                if c.reordered == 0 {
                    0.0
                } else {
                    c.extent_sum as f64 / c.reordered as f64
                }
            }),
            reorder_extent_max: self.extent_measured.then_some(c.extent_max),
            late: c.late,
            errors: c.errors,
            corrupt: c.corrupt,
            frames_completed: c.completed,
            frames_dropped: c.dropped,
            frames_repeated: c.repeated,
            jitter_us: if self.jitter_n == 0 {
                0.0
            } else {
                self.jitter_sum_ns / self.jitter_n as f64 / 1e3
            },
            ipdv: self.ipdv.ipdv_stats(),
            delay_variation: self.delay.variation_stats(),
        }
    }

    /// The distributions, serialised.
    pub fn histograms(&self) -> MediaHistograms {
        MediaHistograms {
            relative_delay_ns: self.delay.encode_positive(),
            relative_delay_negative_ns: self.delay.encode_negative(),
            ipdv_ns: self.ipdv.encode_positive(),
            ipdv_negative_ns: self.ipdv.encode_negative(),
        }
    }
}
