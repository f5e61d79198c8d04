//! The pure half of `goodput dns`: a query as bytes, a reply read into
//! figures, the expectation an answer is held to, and the run's detail.
//!
//! The DNS codec is hickory-proto's; this module only decides what to ask
//! and what a reply means. A reply is read with bounds that do not depend
//! on the peer: at most [`MAX_MESSAGE`] bytes (what a TCP length prefix can
//! say), at most [`MAX_ANSWERS_KEPT`] answers kept as text, each at most
//! [`MAX_ANSWER_TEXT`] bytes long.

use std::collections::BTreeMap;
use std::str::FromStr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use serde::{Deserialize, Serialize};

/// A query's name and record type, as the engine passes them back in.
pub use hickory_proto::rr::{Name as QueryName, RecordType as QueryType};

/// DNS over UDP and TCP's port.
pub const DNS_PORT: u16 = 53;
/// DNS over TLS's port (RFC 7858).
pub const DOT_PORT: u16 = 853;
/// The largest DNS message: what TCP's two-byte length prefix can say.
pub const MAX_MESSAGE: usize = 65_535;
/// The UDP payload size our queries advertise with EDNS(0): the size DNS
/// flag day 2020 settled on, which fits a 1280-byte IPv6 MTU.
pub const EDNS_PAYLOAD: u16 = 1232;
/// Answers of one reply kept as text in the result.
pub const MAX_ANSWERS_KEPT: usize = 64;
/// Bytes of one answer's text kept in the result.
pub const MAX_ANSWER_TEXT: usize = 512;

/// The record types `goodput dns` asks for (a type hickory knows by name
/// but that is not a plain question, such as `ANY`, `AXFR` or `OPT`, is
/// refused).
pub const RECORD_TYPES: [&str; 16] = [
    "A", "AAAA", "CAA", "CNAME", "DNSKEY", "DS", "HTTPS", "MX", "NAPTR", "NS", "PTR", "SOA", "SRV", "SSHFP",
    "SVCB", "TXT",
];

/// How queries travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DnsTransport {
    /// UDP, retried over TCP when a reply comes truncated (TC).
    #[default]
    Udp,
    /// TCP, a connection per query (RFC 7766 framing).
    Tcp,
    /// DNS over TLS (RFC 7858), a connection per query.
    Tls,
}

impl DnsTransport {
    /// Its name, as the spec writes it.
    pub fn name(self) -> &'static str {
        match self {
            DnsTransport::Udp => "udp",
            DnsTransport::Tcp => "tcp",
            DnsTransport::Tls => "tls",
        }
    }

    /// The port a server has when its address names none.
    pub fn default_port(self) -> u16 {
        match self {
            DnsTransport::Udp | DnsTransport::Tcp => DNS_PORT,
            DnsTransport::Tls => DOT_PORT,
        }
    }
}

/// A record type by its name (any case), one of [`RECORD_TYPES`].
pub fn record_type(name: &str) -> Result<RecordType, String> {
    let upper = name.to_ascii_uppercase();
    if !RECORD_TYPES.contains(&upper.as_str()) {
        return Err(format!(
            "unknown record type '{name}'; one of {}",
            RECORD_TYPES.join(", ")
        ));
    }
    RecordType::from_str(&upper).map_err(|e| format!("record type '{name}': {e}"))
}

/// A query name, made fully qualified (`example.org` asks for
/// `example.org.`: no search list is applied).
pub fn query_name(name: &str) -> Result<Name, String> {
    if name.is_empty() {
        return Err("is empty".into());
    }
    let mut n = Name::from_utf8(name).map_err(|e| format!("'{name}' is not a domain name: {e}"))?;
    n.set_fqdn(true);
    Ok(n)
}

/// The bytes of one query for `name`'s `record` records, with message id
/// `id`, asking for recursion when `recursion`, and advertising
/// [`EDNS_PAYLOAD`] bytes of UDP payload.
pub fn query_message(id: u16, name: &Name, record: RecordType, recursion: bool) -> Result<Vec<u8>, String> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(recursion)
        .add_query(Query::query(name.clone(), record));
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    m.set_edns(edns);
    m.to_vec().map_err(|e| format!("cannot encode the query: {e}"))
}

/// A reply that answers our query.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Its response code's number (extended with EDNS's upper bits).
    pub rcode: u16,
    /// The response code's name (`NOERROR`, `NXDOMAIN`, …).
    pub rcode_name: String,
    /// The TC bit: the server had more to say than the transport carried.
    pub truncated: bool,
    /// Records of the asked type in the answer section.
    pub answer_count: u32,
    /// Their data as text, at most [`MAX_ANSWERS_KEPT`], each cut at
    /// [`MAX_ANSWER_TEXT`] bytes.
    pub answers: Vec<String>,
}

/// Why bytes that came back are not a reply to our query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// Not a DNS message, or a broken one (cut short, a compression
    /// pointer that loops, a count past its data).
    #[error("malformed reply: {0}")]
    Malformed(String),
    /// A well-formed message that answers something else: another id,
    /// another question, or a query rather than a response.
    #[error("unsolicited message: {0}")]
    Unsolicited(String),
}

/// Reads `bytes` as the reply to query `id` for `name`'s `record` records.
/// The id is checked on the header's two bytes first, so a flood of
/// messages with other ids costs no parse.
pub fn read_reply(bytes: &[u8], id: u16, name: &Name, record: RecordType) -> Result<Reply, ReplyError> {
    if bytes.len() < 12 {
        return Err(ReplyError::Malformed(format!(
            "{} bytes, shorter than the 12-byte header",
            bytes.len()
        )));
    }
    if bytes.len() > MAX_MESSAGE {
        return Err(ReplyError::Malformed(format!(
            "{} bytes, over the {MAX_MESSAGE}-byte limit of a DNS message",
            bytes.len()
        )));
    }
    let got = u16::from_be_bytes([bytes[0], bytes[1]]);
    if got != id {
        return Err(ReplyError::Unsolicited(format!("id {got}, the query's is {id}")));
    }
    let m = Message::from_vec(bytes).map_err(|e| ReplyError::Malformed(e.to_string()))?;
    if m.message_type() != MessageType::Response {
        return Err(ReplyError::Unsolicited("a query, not a response".into()));
    }
    // A truncated reply may carry no question; any other must carry ours.
    match m.queries() {
        [] if m.truncated() => {}
        [q] if q.name() == name && q.query_type() == record => {}
        qs => {
            let asked: Vec<String> = qs.iter().take(4).map(|q| q.to_string()).collect();
            return Err(ReplyError::Unsolicited(format!(
                "it answers {}, not {name} {record}",
                if asked.is_empty() {
                    "no question".to_owned()
                } else {
                    asked.join(", ")
                }
            )));
        }
    }
    let rcode = m.response_code();
    let of_type = m.answers().iter().filter(|r| r.record_type() == record);
    let answer_count = of_type.clone().count().min(u32::MAX as usize) as u32;
    let answers = of_type
        .take(MAX_ANSWERS_KEPT)
        .map(|r| cut(r.data().to_string()))
        .collect();
    Ok(Reply {
        rcode: u16::from(rcode),
        rcode_name: rcode_name(rcode),
        truncated: m.truncated(),
        answer_count,
        answers,
    })
}

fn rcode_name(rcode: ResponseCode) -> String {
    match rcode {
        ResponseCode::Unknown(n) => format!("RCODE{n}"),
        c => format!("{c:?}").to_ascii_uppercase(),
    }
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_ANSWER_TEXT {
        let mut end = MAX_ANSWER_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// An answer's text as it is compared: no trailing dot, lower case.
fn canonical(s: &str) -> String {
    s.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// What the answers must be: each expected value among them, and (with a
/// pattern) at least one answer that matches it.
#[derive(Debug, Clone)]
pub struct Expectation {
    values: Vec<String>,
    pattern: Option<regex::Regex>,
}

impl Expectation {
    /// From a spec's `expect` and `expect_pattern`; the error says why the
    /// pattern does not compile.
    pub fn new(values: &[String], pattern: Option<&str>) -> Result<Self, String> {
        let pattern = pattern
            .map(|p| {
                regex::RegexBuilder::new(p)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("not a regular expression: {e}"))
            })
            .transpose()?;
        Ok(Self {
            values: values.iter().map(|v| canonical(v)).collect(),
            pattern,
        })
    }

    /// Whether it asks anything of the answers.
    pub fn is_set(&self) -> bool {
        !self.values.is_empty() || self.pattern.is_some()
    }

    /// Whether `answers` meet it; an expectation that asks nothing is met.
    pub fn met_by(&self, answers: &[String]) -> bool {
        let have: Vec<String> = answers.iter().map(|a| canonical(a)).collect();
        self.values.iter().all(|v| have.contains(v))
            && self
                .pattern
                .as_ref()
                .is_none_or(|p| answers.iter().any(|a| p.is_match(a)))
    }

    /// What it asks, for a message (`192.0.2.1, 192.0.2.2 and one
    /// matching /^v=spf1/`).
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.values.clone();
        if let Some(p) = &self.pattern {
            parts.push(format!("one matching /{}/", p.as_str()));
        }
        parts.join(" and ")
    }
}

/// One query of a run, as it went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DnsQuery {
    /// Its number in the run, from 1.
    pub seq: u64,
    /// Tries sent (1 + the retries it used).
    pub attempts: u32,
    /// How it travelled when it was answered (a truncated UDP reply is
    /// asked again over TCP).
    pub transport: DnsTransport,
    /// Time from the query sent to its reply, µs (the answered try's;
    /// TCP and TLS: after the connection was set up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_us: Option<f64>,
    /// TCP and TLS: connection set-up (and handshake) of the answered
    /// try, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_us: Option<f64>,
    /// The reply's response code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcode: Option<String>,
    /// Records of the asked type in the answer.
    pub answer_count: u32,
    /// Their data (at most 64, each cut at 512 bytes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
    /// Whether the answer met the expectation (none: nothing expected, or
    /// no answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<bool>,
    /// Why no answer came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Resolution times over a run's answered queries, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DnsTimes {
    /// Answered queries.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Median (nearest rank).
    pub p50_us: f64,
    /// 95th percentile (nearest rank).
    pub p95_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

impl DnsTimes {
    /// Of `times` (µs), none when empty.
    pub fn of(times: &[f64]) -> Option<Self> {
        if times.is_empty() {
            return None;
        }
        let mut t: Vec<f64> = times.to_vec();
        t.sort_by(f64::total_cmp);
        let rank = |q: f64| t[((q * t.len() as f64).ceil() as usize).clamp(1, t.len()) - 1];
        Some(Self {
            count: t.len() as u64,
            min_us: t[0],
            p50_us: rank(0.5),
            p95_us: rank(0.95),
            max_us: t[t.len() - 1],
            mean_us: t.iter().sum::<f64>() / t.len() as f64,
        })
    }
}

/// A dns run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DnsDetail {
    /// The name asked for, fully qualified.
    pub name: String,
    /// The record type asked for.
    pub record: String,
    /// How queries travelled.
    pub transport: DnsTransport,
    /// The server's address and port.
    pub server: String,
    /// Whether the server was the system's resolver (`/etc/resolv.conf`).
    pub system_resolver: bool,
    /// What the answers were expected to hold, in words (none: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// Queries sent.
    pub queries: u64,
    /// Queries answered (any response code).
    pub answered: u64,
    /// Queries with no reply after every try.
    pub lost: u64,
    /// Tries past each query's first.
    pub retries: u64,
    /// Answered queries whose answer did not meet the expectation.
    pub mismatched: u64,
    /// Replies by response code.
    pub rcodes: BTreeMap<String, u64>,
    /// The last answered query's response code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcode: Option<String>,
    /// Its number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcode_value: Option<u16>,
    /// Records of the asked type in the last answered query's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_count: Option<u32>,
    /// Resolution times of the answered queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<DnsTimes>,
    /// Replies that were not DNS messages, or broken ones; ignored.
    pub malformed: u64,
    /// Messages that answered another id or question; ignored.
    pub unsolicited: u64,
    /// Truncated replies (TC) over UDP, each asked again over TCP.
    pub truncated: u64,
    /// UDP replies larger than the payload size the query advertised;
    /// ignored.
    pub oversized: u64,
    /// Every query (at most the run's record cap).
    pub query_log: Vec<DnsQuery>,
}

impl DnsDetail {
    /// Percent of queries with no reply.
    pub fn loss_percent(&self) -> Option<f64> {
        (self.queries > 0).then(|| self.lost as f64 * 100.0 / self.queries as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Message;
    use hickory_proto::rr::{rdata, RData, Record};

    fn reply_to(query: &[u8], edit: impl FnOnce(&mut Message)) -> Vec<u8> {
        let q = Message::from_vec(query).unwrap();
        let mut m = Message::new();
        m.set_id(q.id()).set_message_type(MessageType::Response);
        m.add_query(q.queries()[0].clone());
        edit(&mut m);
        m.to_vec().unwrap()
    }

    #[test]
    fn a_reply_reads_its_answers_of_the_asked_type() {
        let name = query_name("www.goodput.test").unwrap();
        assert_eq!(name.to_string(), "www.goodput.test.");
        let q = query_message(7, &name, RecordType::A, true).unwrap();
        let bytes = reply_to(&q, |m| {
            let a = |ip: [u8; 4]| {
                Record::from_rdata(
                    name.clone(),
                    60,
                    RData::A(rdata::A::from(std::net::Ipv4Addr::from(ip))),
                )
            };
            m.add_answer(Record::from_rdata(
                name.clone(),
                60,
                RData::CNAME(rdata::CNAME(query_name("x.goodput.test").unwrap())),
            ));
            m.add_answer(a([192, 0, 2, 1]));
            m.add_answer(a([192, 0, 2, 2]));
        });
        let r = read_reply(&bytes, 7, &name, RecordType::A).unwrap();
        assert_eq!(r.rcode_name, "NOERROR");
        assert_eq!((r.rcode, r.truncated, r.answer_count), (0, false, 2));
        assert_eq!(r.answers, ["192.0.2.1", "192.0.2.2"]);
        let e = Expectation::new(&["192.0.2.2".into()], Some(r"^192\.0\.2\.1$")).unwrap();
        assert!(e.met_by(&r.answers));
        assert!(!e.met_by(&["192.0.2.2".into()]));
        assert!(!Expectation::new(&["192.0.2.9".into()], None)
            .unwrap()
            .met_by(&r.answers));
        assert!(Expectation::new(&["X.goodput.TEST.".into()], None)
            .unwrap()
            .met_by(&["x.goodput.test.".into()]));
    }

    #[test]
    fn other_ids_questions_and_broken_bytes_are_told_apart() {
        let name = query_name("a.goodput.test").unwrap();
        let q = query_message(9, &name, RecordType::TXT, false).unwrap();
        let ok = reply_to(&q, |m| {
            m.set_response_code(ResponseCode::NXDomain);
        });
        let r = read_reply(&ok, 9, &name, RecordType::TXT).unwrap();
        assert_eq!((r.rcode, r.rcode_name.as_str()), (3, "NXDOMAIN"));
        assert!(matches!(
            read_reply(&ok, 10, &name, RecordType::TXT),
            Err(ReplyError::Unsolicited(_))
        ));
        assert!(matches!(
            read_reply(&q, 9, &name, RecordType::TXT),
            Err(ReplyError::Unsolicited(_))
        ));
        let other = query_name("b.goodput.test").unwrap();
        assert!(matches!(
            read_reply(&ok, 9, &other, RecordType::TXT),
            Err(ReplyError::Unsolicited(_))
        ));
        assert!(matches!(
            read_reply(&ok[..ok.len() - 3], 9, &name, RecordType::TXT),
            Err(ReplyError::Malformed(_))
        ));
        assert!(matches!(
            read_reply(&ok[..5], 9, &name, RecordType::TXT),
            Err(ReplyError::Malformed(_))
        ));
        // A name that is a compression pointer to itself.
        let mut looped = ok[..12].to_vec();
        looped[4..6].copy_from_slice(&1u16.to_be_bytes());
        looped[6..12].fill(0);
        looped.extend_from_slice(&[0xc0, 12, 0, 16, 0, 1]);
        assert!(matches!(
            read_reply(&looped, 9, &name, RecordType::TXT),
            Err(ReplyError::Malformed(_))
        ));
    }

    #[test]
    fn record_types_are_the_plain_questions() {
        assert_eq!(record_type("aaaa").unwrap(), RecordType::AAAA);
        assert_eq!(
            record_type("AXFR").unwrap_err(),
            "unknown record type 'AXFR'; one of A, AAAA, CAA, CNAME, DNSKEY, DS, HTTPS, MX, NAPTR, \
             NS, PTR, SOA, SRV, SSHFP, SVCB, TXT"
        );
        for t in RECORD_TYPES {
            record_type(t).unwrap();
        }
    }

    #[test]
    fn times_take_the_nearest_rank() {
        let t = DnsTimes::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (t.min_us, t.p50_us, t.p95_us, t.max_us, t.mean_us),
            (1.0, 3.0, 5.0, 5.0, 3.0)
        );
        assert_eq!(DnsTimes::of(&[]), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_read_without_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let name = query_name("p.goodput.test").unwrap();
            let _ = read_reply(&bytes, u16::from_be_bytes([bytes.first().copied().unwrap_or(0), bytes.get(1).copied().unwrap_or(0)]), &name, RecordType::A);
        }
    }
}
