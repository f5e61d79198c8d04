use goodput_core::result::{ConnectionRecord, Interval, StampPacket, TestResult};

/// Receives a run's events as they happen. Called from the run's own task,
/// one event at a time, so an implementation needs no locking; it should not
/// block for long (it delays the next status line, not the data path).
pub trait Observer: Send {
    /// A status interval ended.
    fn on_interval(&mut self, interval: &Interval);
    /// A connection ended (or was aborted).
    fn on_connection(&mut self, record: &ConnectionRecord);
    /// A connection was established (ctsTraffic's "established" lines).
    /// Only called when [`Observer::wants_established`] says so.
    fn on_established(&mut self, _index: u64, _local: &str, _remote: &str, _elapsed_s: f64) {}
    /// Whether to report established connections at all: each costs the data
    /// path a message, which a churn test can do without.
    fn wants_established(&self) -> bool {
        false
    }
    /// A run starts: its title and its settings as label/value lines (the
    /// console's banner).
    fn on_start(&mut self, _title: &str, _settings: &[(String, String)]) {}
    /// Something the user should know that is not tied to one connection.
    fn on_notice(&mut self, _text: &str) {}
    /// A whole test ended inside a longer run (one iperf3 test of a server).
    fn on_result(&mut self, _result: &TestResult) {}
    /// A STAMP packet's fate was decided. Only called when
    /// [`Observer::wants_packets`] says so.
    fn on_packet(&mut self, _packet: &StampPacket) {}
    /// A trace's hop is complete (hops come in order).
    fn on_hop(&mut self, _hop: &goodput_core::path::TraceHop) {}
    /// A ping's request was answered, refused, failed or timed out.
    fn on_ping(&mut self, _reply: &goodput_core::path::PingReply) {}
    /// A continuous OWAMP stream's session ended: its summary, in the
    /// direction to the server (`to_server`) or from it.
    fn on_one_way_summary(&mut self, _to_server: bool, _summary: &goodput_core::result::OneWaySummary) {}
    /// Whether to report every packet (costs an event per packet).
    fn wants_packets(&self) -> bool {
        false
    }
    /// Whether this observer keeps the packets' delays itself (from
    /// [`Observer::on_packet`]: a stream kept as summaries), so the run
    /// need not. A run that honours it (the STAMP hub's) keeps its
    /// sessions' tallies as exact counts with no delay distributions:
    /// its result's delay figures are then unknown unless the observer's
    /// owner fills them in. Only asked when [`Observer::wants_packets`].
    fn keeps_delays(&self) -> bool {
        false
    }
}

/// An observer that ignores everything (for an embedded server).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullObserver;

impl Observer for NullObserver {
    fn on_interval(&mut self, _: &Interval) {}
    fn on_connection(&mut self, _: &ConnectionRecord) {}
}
