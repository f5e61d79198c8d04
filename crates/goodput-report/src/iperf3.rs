//! iperf3 views of a result: the console table (iperf3's sender/receiver
//! lines, both ends' figures) and iperf3's `-J` document shape, so tools
//! that parse iperf3 output can read goodput's.

use goodput_core::result::{Iperf3Detail, Iperf3Protocol, Iperf3StreamRecord, TestKind, TestResult};
use goodput_core::units::format_bits_per_second;
use serde_json::{json, Map, Value};

fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

/// Bytes as iperf3 prints them: binary units named KBytes, MBytes,
/// GBytes, with three significant figures (`23.9 MBytes`, `128 KBytes`).
pub(crate) fn iperf3_bytes(n: u64) -> String {
    const UNITS: [(&str, f64); 4] = [
        ("TBytes", 1_099_511_627_776.0),
        ("GBytes", 1_073_741_824.0),
        ("MBytes", 1_048_576.0),
        ("KBytes", 1024.0),
    ];
    let Some((name, size)) = UNITS.iter().find(|(_, size)| n as f64 >= *size) else {
        return format!("{n} Bytes");
    };
    let v = n as f64 / size;
    match v {
        v if v < 9.995 => format!("{v:.2} {name}"),
        v if v < 99.95 => format!("{v:.1} {name}"),
        v => format!("{v:.0} {name}"),
    }
}

/// The iperf3 table of a result on its own (a server prints one per test).
pub fn iperf3_summary(result: &TestResult) -> String {
    result
        .iperf3()
        .as_ref()
        .map(|d| summary(result, d))
        .unwrap_or_default()
}

/// The iperf3 part of the console summary.
pub(crate) fn summary(result: &TestResult, d: &Iperf3Detail) -> String {
    let mut t = String::new();
    let proto = match d.protocol {
        Iperf3Protocol::Tcp => "TCP",
        Iperf3Protocol::Udp => "UDP",
    };
    let mode = if d.bidirectional {
        "bidirectional"
    } else if d.reverse {
        "reverse (server sends)"
    } else {
        "forward (client sends)"
    };
    t.push_str(&format!(
        "\n  iperf3 {proto} test, {mode}, {} stream(s), {} blocks, cookie {}\n",
        d.parallel,
        iperf3_bytes(u64::from(d.block_bytes)),
        d.cookie
    ));
    t.push_str("  [ ID] Role      Local                  Remote                 Bytes            Seconds  Rate             Peer's bytes     Peer's rate\n");
    for s in &d.streams {
        let (peer_bytes, peer_rate) = match &s.peer {
            Some(p) => (
                iperf3_bytes(p.bytes),
                format_bits_per_second(bps(p.bytes, p.seconds) / 8.0),
            ),
            None => ("not available".into(), String::new()),
        };
        t.push_str(&format!(
            "  [{:>3}] {:<9} {:<22} {:<22} {:<16} {:>7.3}  {:<16} {:<16} {}\n",
            s.id,
            if s.sender { "sender" } else { "receiver" },
            s.local_address,
            s.remote_address,
            iperf3_bytes(s.bytes),
            s.seconds,
            format_bits_per_second(bps(s.bytes, s.seconds) / 8.0),
            peer_bytes,
            peer_rate
        ));
        if let Some(r) = s.retransmits {
            t.push_str(&format!("        retransmits {r}"));
            if let Some(c) = s.max_snd_cwnd_bytes {
                t.push_str(&format!(", max cwnd {}", iperf3_bytes(c)));
            }
            if let Some([lo, mean, hi]) = s.rtt_us {
                t.push_str(&format!(", RTT min/mean/max {lo}/{mean}/{hi} µs"));
            }
            t.push('\n');
        }
        if let Some(u) = s.udp.filter(|_| !s.sender) {
            t.push_str(&format!(
                "        jitter {:.3} ms, lost {}/{} datagrams ({:.3}%), out of order {}, arrived {}\n",
                u.jitter_ms,
                u.lost,
                u.packets,
                if u.packets > 0 {
                    u.lost as f64 * 100.0 / u.packets as f64
                } else {
                    0.0
                },
                u.out_of_order,
                u.received
            ));
        } else if let (Some(u), Some(p)) = (s.udp, s.peer.as_ref()) {
            t.push_str(&format!(
                "        sent {} datagrams; receiver: jitter {:.3} ms, lost {}/{} datagrams\n",
                u.packets, p.jitter_ms, p.lost, p.packets
            ));
        }
    }
    t.push_str(&format!(
        "  CPU: this end {:.1}% (user {:.1}%, system {:.1}%)",
        d.cpu.total_percent, d.cpu.user_percent, d.cpu.system_percent
    ));
    if let Some(c) = d.peer_cpu {
        t.push_str(&format!(", peer {:.1}%", c.total_percent));
    }
    t.push('\n');
    if let Some(text) = &d.server_output_text {
        if result.kind == TestKind::Iperf3Client {
            t.push_str("  Server output:\n");
            for line in text.lines() {
                t.push_str(&format!("    {line}\n"));
            }
        }
    }
    if let Some(e) = &d.error {
        t.push_str(&format!("  iperf3 test failed: {e}\n"));
    }
    t
}

fn stream_sum(d: &Iperf3Detail, sender_side: bool, forward: Option<bool>, is_client: bool) -> Value {
    // `forward`: Some(true) = client→server streams only, Some(false) =
    // server→client only (the "_bidir_reverse" sums), None = all.
    let client_sends = |s: &Iperf3StreamRecord| if is_client { s.sender } else { !s.sender };
    let streams: Vec<&Iperf3StreamRecord> = d
        .streams
        .iter()
        .filter(|s| forward.is_none_or(|f| client_sends(s) == f))
        .collect();
    let mut bytes = 0u64;
    let mut seconds: f64 = 0.0;
    let mut retrans = 0u64;
    let mut any_retrans = false;
    for s in &streams {
        // The sender's numbers are the sending end's, the receiver's the
        // receiving end's: take ours or the peer's accordingly.
        let ours = s.sender == sender_side;
        let (b, secs) = if ours {
            (s.bytes, s.seconds)
        } else {
            s.peer.map_or((0, 0.0), |p| (p.bytes, p.seconds))
        };
        bytes += b;
        seconds = seconds.max(secs);
        if sender_side {
            if let Some(r) = if ours {
                s.retransmits
            } else {
                s.peer.and_then(|p| u64::try_from(p.retransmits).ok())
            } {
                retrans += r;
                any_retrans = true;
            }
        }
    }
    let mut m = Map::new();
    m.insert("start".into(), 0.into());
    m.insert("end".into(), seconds.into());
    m.insert("seconds".into(), seconds.into());
    m.insert("bytes".into(), bytes.into());
    m.insert("bits_per_second".into(), bps(bytes, seconds).into());
    if sender_side && any_retrans {
        m.insert("retransmits".into(), retrans.into());
    }
    m.insert("sender".into(), sender_side.into());
    Value::Object(m)
}

/// The result as iperf3's `-J` document (no duplicate keys; −1 printed
/// signed, as iperf3 3.14+ does).
pub fn iperf3_json(result: &TestResult) -> Value {
    let Some(d) = result.iperf3() else {
        return json!({"start": {}, "intervals": [], "end": {}, "error": "not an iperf3 test"});
    };
    let is_client = result.kind == TestKind::Iperf3Client;
    let udp = d.protocol == Iperf3Protocol::Udp;
    let socket_of = |id: u32| i64::from(id) + 4;
    let connected: Vec<Value> = d
        .streams
        .iter()
        .map(|s| {
            let (lh, lp) = split(&s.local_address);
            let (rh, rp) = split(&s.remote_address);
            json!({"socket": socket_of(s.id), "local_host": lh, "local_port": lp, "remote_host": rh, "remote_port": rp})
        })
        .collect();
    let secs = result.started_unix_ms / 1000;
    let mut start = json!({
        "connected": connected,
        "version": format!("goodput {}", result.tool.version),
        "system_info": "Linux",
        "timestamp": {"time": rfc1123(secs), "timesecs": secs, "timemillisecs": result.started_unix_ms},
        "cookie": d.cookie,
        "tcp_mss_default": 0,
        "target_bitrate": d.target_bits_per_second,
        "test_start": {
            "protocol": if udp { "UDP" } else { "TCP" },
            "num_streams": d.parallel,
            "blksize": d.block_bytes,
            "omit": d.omit_s,
            "duration": d.duration_s,
            "bytes": d.bytes_limit,
            "blocks": d.blocks_limit,
            "reverse": u8::from(d.reverse),
            "tos": d.tos,
            "target_bitrate": d.target_bits_per_second,
            "bidir": u8::from(d.bidirectional),
        },
    });
    let (ch, cp) = split(&d.control_remote);
    if is_client {
        start["connecting_to"] = json!({"host": ch, "port": cp});
    } else {
        start["accepted_connection"] = json!({"host": ch, "port": cp});
    }
    let intervals: Vec<Value> = d
        .intervals
        .iter()
        .map(|iv| {
            let secs = iv.end_s - iv.start_s;
            let streams: Vec<Value> = iv
                .streams
                .iter()
                .map(|s| {
                    let mut o = json!({
                        "socket": socket_of(s.id), "start": iv.start_s, "end": iv.end_s, "seconds": secs,
                        "bytes": s.bytes, "bits_per_second": bps(s.bytes, secs), "omitted": iv.omitted, "sender": s.sender,
                    });
                    let m = o.as_object_mut().expect("object");
                    if let Some(r) = s.retransmits {
                        m.insert("retransmits".into(), r.into());
                    }
                    if let Some(c) = s.snd_cwnd_bytes {
                        m.insert("snd_cwnd".into(), c.into());
                    }
                    if let Some(r) = s.rtt_us {
                        m.insert("rtt".into(), r.into());
                    }
                    if let Some(r) = s.rttvar_us {
                        m.insert("rttvar".into(), r.into());
                    }
                    if let Some(p) = s.pmtu_bytes {
                        m.insert("pmtu".into(), p.into());
                    }
                    if let Some(p) = s.packets {
                        m.insert("packets".into(), p.into());
                    }
                    if let Some(l) = s.lost {
                        m.insert("lost_packets".into(), l.into());
                        let total = s.packets.unwrap_or(0) + l;
                        let pct = if total > 0 { l as f64 * 100.0 / total as f64 } else { 0.0 };
                        m.insert("lost_percent".into(), pct.into());
                    }
                    if let Some(j) = s.jitter_ms {
                        m.insert("jitter_ms".into(), j.into());
                    }
                    o
                })
                .collect();
            let sum_of = |fwd: Option<bool>| {
                let sel: Vec<&Value> = streams
                    .iter()
                    .zip(&iv.streams)
                    .filter(|(_, s)| {
                        let client_sends = if is_client { s.sender } else { !s.sender };
                        fwd.is_none_or(|f| client_sends == f)
                    })
                    .map(|(v, _)| v)
                    .collect();
                let bytes: u64 = sel.iter().filter_map(|v| v["bytes"].as_u64()).sum();
                let sender = sel.first().and_then(|v| v["sender"].as_bool()).unwrap_or(false);
                let mut m = json!({"start": iv.start_s, "end": iv.end_s, "seconds": secs, "bytes": bytes,
                    "bits_per_second": bps(bytes, secs), "omitted": iv.omitted, "sender": sender});
                let r: Vec<u64> = sel.iter().filter_map(|v| v["retransmits"].as_u64()).collect();
                if !r.is_empty() {
                    m["retransmits"] = r.iter().sum::<u64>().into();
                }
                m
            };
            let mut o = json!({"streams": streams});
            if d.bidirectional {
                o["sum"] = sum_of(Some(true));
                o["sum_bidir_reverse"] = sum_of(Some(false));
            } else {
                o["sum"] = sum_of(None);
            }
            o
        })
        .collect();

    let mut end = Map::new();
    let streams: Vec<Value> = d
        .streams
        .iter()
        .map(|s| {
            let mine = json!({"socket": socket_of(s.id), "start": 0, "end": s.seconds, "seconds": s.seconds,
                "bytes": s.bytes, "bits_per_second": bps(s.bytes, s.seconds), "sender": s.sender});
            if udp {
                let u = s.udp.unwrap_or_default();
                let (jitter, lost, packets) = if s.sender {
                    s.peer.map_or((0.0, 0, u.packets as i64), |p| {
                        (p.jitter_ms, p.lost, u.packets as i64)
                    })
                } else {
                    (u.jitter_ms, u.lost as i64, u.packets as i64)
                };
                let mut o = mine;
                o["jitter_ms"] = jitter.into();
                o["lost_packets"] = lost.into();
                o["packets"] = packets.into();
                o["lost_percent"] = (if packets > 0 {
                    lost as f64 * 100.0 / packets as f64
                } else {
                    0.0
                })
                .into();
                o["out_of_order"] = u.out_of_order.into();
                json!({"udp": o})
            } else {
                let theirs = json!({"socket": socket_of(s.id), "start": 0,
                    "end": s.peer.map_or(0.0, |p| p.seconds), "seconds": s.peer.map_or(0.0, |p| p.seconds),
                    "bytes": s.peer.map_or(0, |p| p.bytes),
                    "bits_per_second": s.peer.map_or(0.0, |p| bps(p.bytes, p.seconds)), "sender": s.sender});
                let mut mine = mine;
                if let Some(r) = s.retransmits {
                    mine["retransmits"] = r.into();
                    if let Some(c) = s.max_snd_cwnd_bytes {
                        mine["max_snd_cwnd"] = c.into();
                    }
                    if let Some([lo, mean, hi]) = s.rtt_us {
                        mine["max_rtt"] = hi.into();
                        mine["min_rtt"] = lo.into();
                        mine["mean_rtt"] = mean.into();
                    }
                }
                if s.sender {
                    json!({"sender": mine, "receiver": theirs})
                } else {
                    let mut theirs = theirs;
                    if let Some(r) = s.peer.and_then(|p| u64::try_from(p.retransmits).ok()) {
                        theirs["retransmits"] = r.into();
                    }
                    json!({"sender": theirs, "receiver": mine})
                }
            }
        })
        .collect();
    end.insert("streams".into(), Value::Array(streams));
    let fwd = if d.bidirectional { Some(true) } else { None };
    end.insert("sum_sent".into(), stream_sum(d, true, fwd, is_client));
    end.insert("sum_received".into(), stream_sum(d, false, fwd, is_client));
    if d.bidirectional {
        end.insert(
            "sum_sent_bidir_reverse".into(),
            stream_sum(d, true, Some(false), is_client),
        );
        end.insert(
            "sum_received_bidir_reverse".into(),
            stream_sum(d, false, Some(false), is_client),
        );
    }
    if udp {
        // iperf3's UDP `sum`: the receivers' view (jitter averaged over streams).
        let recv: Vec<(f64, i64, i64, u64)> = d
            .streams
            .iter()
            .map(|s| {
                if s.sender {
                    s.peer.map_or((0.0, 0, 0, 0), |p| {
                        (
                            p.jitter_ms,
                            p.lost,
                            s.udp.map_or(0, |u| u.packets) as i64,
                            p.bytes,
                        )
                    })
                } else {
                    let u = s.udp.unwrap_or_default();
                    (u.jitter_ms, u.lost as i64, u.packets as i64, s.bytes)
                }
            })
            .collect();
        let n = recv.len().max(1) as f64;
        let lost: i64 = recv.iter().map(|r| r.1).sum();
        let packets: i64 = recv.iter().map(|r| r.2).sum();
        let bytes: u64 = recv.iter().map(|r| r.3).sum();
        let seconds = d.streams.iter().map(|s| s.seconds).fold(0.0, f64::max);
        end.insert(
            "sum".into(),
            json!({"start": 0, "end": seconds, "seconds": seconds, "bytes": bytes, "bits_per_second": bps(bytes, seconds),
                "jitter_ms": recv.iter().map(|r| r.0).sum::<f64>() / n, "lost_packets": lost, "packets": packets,
                "lost_percent": if packets > 0 { lost as f64 * 100.0 / packets as f64 } else { 0.0 }, "sender": true}),
        );
    }
    let peer_cpu = d.peer_cpu.unwrap_or_default();
    end.insert(
        "cpu_utilization_percent".into(),
        json!({"host_total": d.cpu.total_percent, "host_user": d.cpu.user_percent, "host_system": d.cpu.system_percent,
            "remote_total": peer_cpu.total_percent, "remote_user": peer_cpu.user_percent, "remote_system": peer_cpu.system_percent}),
    );
    if !udp {
        let (snd, rcv) = if d.reverse == is_client {
            (&d.peer_congestion_used, &d.congestion_used)
        } else {
            (&d.congestion_used, &d.peer_congestion_used)
        };
        if let Some(c) = snd {
            end.insert("sender_tcp_congestion".into(), c.clone().into());
        }
        if let Some(c) = rcv {
            end.insert("receiver_tcp_congestion".into(), c.clone().into());
        }
    }
    let mut doc = json!({"start": start, "intervals": intervals, "end": Value::Object(end)});
    if let Some(t) = &d.title {
        doc["title"] = t.clone().into();
    }
    if let Some(t) = &d.extra_data {
        doc["extra_data"] = t.clone().into();
    }
    if is_client {
        if let Some(j) = &d.server_output_json {
            doc["server_output_json"] = j.clone();
        }
        if let Some(t) = &d.server_output_text {
            doc["server_output_text"] = t.clone().into();
        }
    }
    if let Some(e) = &d.error {
        doc["error"] = e.clone().into();
    }
    doc
}

/// `ip:port` (IPv6 in brackets) into host and port.
fn split(addr: &str) -> (String, u16) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (
            h.trim_start_matches('[').trim_end_matches(']').to_owned(),
            p.parse().unwrap_or(0),
        ),
        None => (addr.to_owned(), 0),
    }
}

/// RFC 1123 date (GMT) for Unix seconds, as iperf3 prints in `timestamp.time`.
fn rfc1123(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_iperf3_prints_them() {
        assert_eq!(iperf3_bytes(25_034_752), "23.9 MBytes");
        assert_eq!(iperf3_bytes(131_072), "128 KBytes");
        assert_eq!(iperf3_bytes(1_178_694), "1.12 MBytes");
        assert_eq!(iperf3_bytes(14_893_478_070), "13.9 GBytes");
        assert_eq!(iperf3_bytes(1000), "1000 Bytes");
    }

    #[test]
    fn rfc1123_dates() {
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(rfc1123(1_795_329_000), "Sun, 22 Nov 2026 06:30:00 GMT");
        assert_eq!(rfc1123(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn split_addresses() {
        assert_eq!(split("127.0.0.1:5201"), ("127.0.0.1".into(), 5201));
        assert_eq!(split("[::1]:40000"), ("::1".into(), 40000));
    }
}
