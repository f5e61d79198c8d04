//! goodput's OWAMP/TWAMP codec against sessions recorded from perfSONAR's
//! own owping, twping, powstream and owfetch talking to owampd and twampd
//! (tests/data/perfsonar, README there): every control message decodes,
//! every HMAC checks with the recorded key, every test packet decrypts,
//! our encoders give back the exact octets the reference sent, and the
//! fetched records are exactly those owstats printed for the session.

use std::path::PathBuf;

use goodput_core::owamp::control::{
    AcceptSession, DataRecord, FetchAck, FetchSession, RequestSession, ServerGreeting, ServerStart,
    SetupResponse, Slot, SlotKind, StopHeader, StopSession,
};
use goodput_core::owamp::crypto::{open_token, Channel, SessionKeys, TestKeys, BLOCK};
use goodput_core::owamp::packet::{self, ReflectorFields, SenderFields};
use goodput_core::owamp::{pfs, Mode};

const PASSPHRASE: &[u8] = b"goodput-test-pass";

fn data(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/perfsonar")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// One test datagram.
struct Udp {
    c2s: bool,
    dst_port: u16,
    data: Vec<u8>,
}

/// A control stream in one direction, read as a passive observer who
/// knows the key.
struct Stream {
    bytes: Vec<u8>,
    pos: usize,
    ch: Channel,
}

impl Stream {
    fn take(&mut self, n: usize) -> Vec<u8> {
        assert!(
            self.pos + n <= self.bytes.len(),
            "stream ends at {} of {}",
            self.bytes.len(),
            self.pos + n
        );
        let v = self.bytes[self.pos..self.pos + n].to_vec();
        self.pos += n;
        v
    }
    fn done(&self) -> bool {
        self.pos == self.bytes.len()
    }
    /// Blocks of a longer message: decrypted and added to the HMAC.
    fn blocks(&mut self, n: usize) -> Vec<u8> {
        let mut b = self.take(n * BLOCK);
        self.ch.decrypt(&mut b);
        self.ch.recv_mac(&b);
        b
    }
    /// The HMAC block that ends a message: must check.
    fn hmac(&mut self, what: &str) {
        let mut b = self.take(BLOCK);
        self.ch.decrypt(&mut b);
        self.ch
            .recv_check(&b)
            .unwrap_or_else(|_| panic!("HMAC of {what}"));
    }
}

struct Session {
    greeting: ServerGreeting,
    mode: Mode,
    keys: Option<SessionKeys>,
    start_accept: u8,
    c2s: Stream,
    s2c: Stream,
    udp: Vec<Udp>,
}

fn open_session(name: &str) -> Session {
    let text = data(name);
    let (mut c2s, mut s2c, mut udp) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let f: Vec<&str> = line.split(' ').collect();
        let c = f[0] == "C2S";
        match f[1] {
            "tcp" => (if c { &mut c2s } else { &mut s2c }).extend(unhex(f[2])),
            "udp" => udp.push(Udp {
                c2s: c,
                dst_port: f[3].parse().unwrap(),
                data: unhex(f[4]),
            }),
            other => panic!("{other}"),
        }
    }
    let greeting = ServerGreeting::decode(s2c[..64].try_into().unwrap());
    assert_eq!(greeting.encode().to_vec(), s2c[..64], "greeting re-encodes");
    let setup = SetupResponse::decode(c2s[..164].try_into().unwrap());
    assert_eq!(setup.encode().to_vec(), c2s[..164], "set-up re-encodes");
    let start = ServerStart::decode(s2c[64..112].try_into().unwrap());
    let mode = Mode::from_bit(setup.mode).expect("one mode");
    let (ch_c, mut ch_s, keys) = if mode.is_secured() && start.accept == 0 {
        assert_eq!(setup.identity(), "gptest");
        let (challenge, keys) = open_token(PASSPHRASE, &greeting.salt, greeting.count, &setup.token);
        assert_eq!(
            challenge, greeting.challenge,
            "the Token opens with the recorded passphrase"
        );
        (
            Channel::secured(&keys, [0; 16], setup.client_iv),
            Channel::secured(&keys, [0; 16], start.server_iv),
            Some(keys),
        )
    } else {
        (Channel::open(), Channel::open(), None)
    };
    let mut last = s2c[96..112].to_vec();
    ch_s.decrypt(&mut last);
    ch_s.recv_mac(&last);
    Session {
        greeting,
        mode,
        keys,
        start_accept: start.accept,
        c2s: Stream {
            bytes: c2s,
            pos: 164,
            ch: ch_c,
        },
        s2c: Stream {
            bytes: s2c,
            pos: 112,
            ch: ch_s,
        },
        udp,
    }
}

#[derive(Debug)]
enum Msg {
    Request(RequestSession, Vec<Slot>),
    Start,
    Stop(StopHeader, Vec<StopSession>),
    Fetch(FetchSession),
}

fn read_request(s: &mut Stream, twoway: bool) -> Msg {
    let mut b = s.blocks(1);
    let cmd = b[0];
    match cmd {
        1 | 5 => {
            b.extend(s.blocks(5));
            let mut full = b.clone();
            full.extend([0u8; 16]);
            s.hmac("Request-Session");
            let r = RequestSession::decode(full[..].try_into().unwrap()).unwrap();
            assert_eq!(r.encode()[..96], full[..96], "request re-encodes");
            let mut slots = Vec::new();
            if cmd == 1 {
                for _ in 0..r.slots {
                    let blk = s.blocks(1);
                    let slot = Slot::decode(blk[..].try_into().unwrap()).unwrap();
                    assert_eq!(slot.encode().to_vec(), blk);
                    slots.push(slot);
                }
                s.hmac("slots");
            }
            Msg::Request(r, slots)
        }
        2 => {
            s.hmac("Start-Sessions");
            Msg::Start
        }
        3 => stop_rest(s, b, twoway),
        4 => {
            b.extend(s.blocks(1));
            b.extend([0u8; 16]);
            s.hmac("Fetch-Session");
            let f = FetchSession::decode(b[..].try_into().unwrap()).unwrap();
            assert_eq!(f.encode()[..32], b[..32]);
            Msg::Fetch(f)
        }
        other => panic!("command {other}"),
    }
}

/// The rest of a Stop-Sessions whose header block was read (TWAMP's
/// carries no records).
fn stop_rest(s: &mut Stream, head: Vec<u8>, twoway: bool) -> Msg {
    let h = StopHeader::decode(head[..].try_into().unwrap()).unwrap();
    assert_eq!(h.encode().to_vec(), head);
    let mut sessions = Vec::new();
    if !twoway {
        for _ in 0..h.sessions {
            let sid: [u8; 16] = s.blocks(1).try_into().unwrap();
            let t = s.blocks(1);
            let next_seq = u32::from_be_bytes(t[0..4].try_into().unwrap());
            let n = u32::from_be_bytes(t[4..8].try_into().unwrap()) as usize;
            assert!(n < 1000);
            let mut tail = t.clone();
            tail.extend(s.blocks(StopSession::tail_len(n) / BLOCK - 1));
            let skips = (0..n)
                .map(|i| goodput_core::owamp::control::SkipRange {
                    first: u32::from_be_bytes(tail[8 + 8 * i..12 + 8 * i].try_into().unwrap()),
                    last: u32::from_be_bytes(tail[12 + 8 * i..16 + 8 * i].try_into().unwrap()),
                })
                .collect();
            let st = StopSession { sid, next_seq, skips };
            let mut enc = sid.to_vec();
            enc.extend(&tail);
            assert_eq!(st.encode(), enc, "stop record re-encodes");
            sessions.push(st);
        }
    }
    s.hmac("Stop-Sessions");
    Msg::Stop(h, sessions)
}

/// Everything the client sent, in order.
fn client_messages(s: &mut Session, twoway: bool) -> Vec<Msg> {
    let mut out = Vec::new();
    while !s.c2s.done() {
        let m = read_request(&mut s.c2s, twoway);
        if let Msg::Stop(h, v) = &m {
            if twoway {
                assert!(v.is_empty() && h.sessions <= 1);
            }
        }
        out.push(m);
    }
    out
}

struct Fetched {
    ack: FetchAck,
    records: Vec<DataRecord>,
}

#[derive(Default)]
struct ServerSaid {
    accepts: Vec<AcceptSession>,
    start_ack: Option<u8>,
    stops: Vec<Msg>,
    fetched: Vec<Fetched>,
}

fn server_messages(s: &mut Session, client: &[Msg], twoway: bool) -> ServerSaid {
    let mut out = ServerSaid::default();
    let mut requests = Vec::new();
    for m in client {
        match m {
            Msg::Request(r, slots) => {
                let mut b = s.s2c.blocks(2);
                b.extend([0u8; 16]);
                s.s2c.hmac("Accept-Session");
                let a = AcceptSession::decode(b[..].try_into().unwrap());
                assert_eq!(a.encode()[..32], b[..32]);
                requests.push((r.clone(), slots.clone()));
                out.accepts.push(a);
            }
            Msg::Start => {
                let b = s.s2c.blocks(1);
                s.s2c.hmac("Start-Ack");
                out.start_ack = Some(b[0]);
            }
            Msg::Stop(..) => {}
            Msg::Fetch(f) => {
                let mut b = s.s2c.blocks(1);
                // The server's own Stop-Sessions may come first.
                while b[0] == 3 && !twoway {
                    out.stops.push(stop_rest(&mut s.s2c, b, false));
                    b = s.s2c.blocks(1);
                }
                let mut full = b.clone();
                full.extend([0u8; 16]);
                s.s2c.hmac("Fetch-Ack");
                let ack = FetchAck::decode(full[..].try_into().unwrap());
                assert_eq!(ack.encode()[..16], full[..16]);
                let mut records = Vec::new();
                if ack.accept == 0 {
                    let echo = s.s2c.blocks(6);
                    let mut e = echo.clone();
                    e.extend([0u8; 16]);
                    s.s2c.hmac("the request's echo");
                    let r = RequestSession::decode(e[..].try_into().unwrap()).unwrap();
                    assert_eq!(r.sid, f.sid, "the echo is the fetched session's request");
                    let slots = s.s2c.blocks(r.slots as usize);
                    s.s2c.hmac("the echo's slots");
                    assert_eq!(slots.len(), 16 * r.slots as usize);
                    let skips = s
                        .s2c
                        .blocks(goodput_core::owamp::control::pad16(8 * ack.skips as usize) / BLOCK);
                    s.s2c.hmac("skip ranges");
                    assert_eq!(skips.len() % 16, 0);
                    let n = ack.records as usize;
                    let raw = s.s2c.blocks(goodput_core::owamp::control::pad16(25 * n) / BLOCK);
                    s.s2c.hmac("data records");
                    for i in 0..n {
                        let r = DataRecord::decode(&raw[25 * i..25 * i + 25]);
                        let mut again = [0u8; 25];
                        r.encode(&mut again);
                        assert_eq!(again[..], raw[25 * i..25 * i + 25]);
                        records.push(r);
                    }
                }
                out.fetched.push(Fetched { ack, records });
            }
        }
    }
    // A server Stop-Sessions after the last reply (no fetch followed).
    while !s.s2c.done() {
        let b = s.s2c.blocks(1);
        assert_eq!(b[0], 3, "only a Stop-Sessions may be left");
        out.stops.push(stop_rest(&mut s.s2c, b, twoway));
    }
    out
}

/// owstats' raw lines: (seq, send time, recv time, ttl).
fn owstats_raw(name: &str) -> Vec<(u32, u64, u64, u8)> {
    data(name)
        .lines()
        .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[4].parse().unwrap(),
                f[7].parse().unwrap(),
            )
        })
        .collect()
}

fn test_keys(s: &Session, sid: &[u8; 16]) -> Option<TestKeys> {
    s.keys.as_ref().map(|k| TestKeys::derive(k, sid))
}

/// A recorded owping session in both directions: the requests, the
/// accepted SIDs, the fetched records against owstats, and every test
/// packet decrypted and re-encrypted to the same octets.
fn owping_both_ways(name: &str, raw_to: &str, raw_from: &str, mode: Mode) {
    let mut s = open_session(name);
    assert_eq!(s.greeting.modes, 7);
    assert_eq!(s.greeting.count, 2048);
    assert_eq!(s.mode, mode);
    let client = client_messages(&mut s, false);
    let server = server_messages(&mut s, &client, false);
    let reqs: Vec<&RequestSession> = client
        .iter()
        .filter_map(|m| match m {
            Msg::Request(r, slots) => {
                // owping's `-i 0.1` is a Poisson stream of mean 0.1 s.
                assert_eq!(slots, &vec![Slot::from_ns(SlotKind::Exponential, 100_000_000)]);
                Some(r)
            }
            _ => None,
        })
        .collect();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[0].conf_receiver && reqs[1].conf_sender,
        "to first, then from"
    );
    assert!(reqs.iter().all(|r| r.packets == 10 && r.padding == 20));
    assert!(server.accepts.iter().all(|a| a.accept == 0));
    assert_eq!(server.start_ack, Some(0));
    let to_sid = server.accepts[0].sid;
    let from_sid = reqs[1].sid;
    assert_eq!(
        server.accepts[1].sid, from_sid,
        "the server echoes the client's SID"
    );
    assert_eq!(to_sid[..4], [127, 0, 0, 1], "SID: receiver address first");
    // The client's Stop-Sessions names its one sending session.
    let client_stop = client.iter().find_map(|m| match m {
        Msg::Stop(h, v) => Some((h, v)),
        _ => None,
    });
    let (h, v) = client_stop.expect("client Stop-Sessions");
    assert_eq!((h.accept, h.sessions), (0, 1));
    assert_eq!((v[0].sid, v[0].next_seq, v[0].skips.len()), (to_sid, 10, 0));
    // The server's names its sending session (the from direction).
    assert!(server.stops.iter().any(
        |m| matches!(m, Msg::Stop(_, v) if v.len() == 1 && v[0].sid == from_sid && v[0].next_seq == 10)
    ));
    // The fetched records are exactly what owstats read from the file.
    assert_eq!(server.fetched.len(), 1);
    let f = &server.fetched[0];
    assert_eq!(
        (f.ack.accept, f.ack.finished, f.ack.next_seq, f.ack.records),
        (0, true, 10, 10)
    );
    let want = owstats_raw(raw_to);
    let got: Vec<(u32, u64, u64, u8)> = f
        .records
        .iter()
        .map(|r| (r.seq, r.send_time, r.recv_time, r.ttl))
        .collect();
    assert_eq!(got, want);
    assert!(
        f.records.iter().all(|r| r.send_err == 1 && r.recv_err == 1),
        "unsynced: 0x0001"
    );
    // Test packets: the to-direction's reach the server's receiver port.
    let to_port = server.accepts[0].port;
    let to_keys = test_keys(&s, &to_sid);
    let mut to_seen = 0;
    for u in s.udp.iter().filter(|u| u.c2s && u.dst_port == to_port) {
        let mut b = u.data.clone();
        assert_eq!(b.len(), packet::sender_header(mode) + 20);
        let f2 = packet::read_sender(mode, to_keys.as_ref(), &mut b).expect("decrypts, HMAC checks");
        let rec = f.records.iter().find(|r| r.seq == f2.seq).unwrap();
        assert_eq!((f2.timestamp, f2.error), (rec.send_time, rec.send_err));
        // Our encoder gives the same header octets.
        let mut again = u.data.clone();
        packet::write_sender(mode, to_keys.as_ref(), &f2, &mut again);
        assert_eq!(again, u.data);
        to_seen += 1;
    }
    assert_eq!(to_seen, 10);
    // The from-direction's packets carry what owstats read on the client.
    let from_keys = test_keys(&s, &from_sid);
    let mut from: Vec<SenderFields> = s
        .udp
        .iter()
        .filter(|u| !u.c2s)
        .map(|u| packet::read_sender(mode, from_keys.as_ref(), &mut u.data.clone()).expect("from packet"))
        .collect();
    from.sort_by_key(|f| f.seq);
    let want: Vec<(u32, u64)> = owstats_raw(raw_from).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        from.iter().map(|f| (f.seq, f.timestamp)).collect::<Vec<_>>(),
        want
    );
    // A wrong key fails the HMAC.
    if mode.is_secured() {
        let wrong = TestKeys::derive(
            &SessionKeys {
                aes: [0; 16],
                hmac: [0; 32],
            },
            &to_sid,
        );
        let u = s.udp.iter().find(|u| u.c2s).unwrap();
        assert!(packet::read_sender(mode, Some(&wrong), &mut u.data.clone()).is_none());
    }
}

#[test]
fn owping_open_mode_both_ways() {
    owping_both_ways(
        "a_owping_open.txt",
        "a_owping_open.a_to.owstats-R.out",
        "a_owping_open.a_from.owstats-R.out",
        Mode::Open,
    );
}

#[test]
fn owping_authenticated_mode_both_ways() {
    owping_both_ways(
        "b_owping_auth.txt",
        "b_b_to.owstats-R.out",
        "b_b_from.owstats-R.out",
        Mode::Authenticated,
    );
}

#[test]
fn owping_encrypted_mode_both_ways() {
    owping_both_ways(
        "c_owping_enc.txt",
        "c_c_to.owstats-R.out",
        "c_c_from.owstats-R.out",
        Mode::Encrypted,
    );
}

fn twping(name: &str, mode: Mode) {
    let mut s = open_session(name);
    assert_eq!(s.greeting.modes & 7, 7);
    assert_eq!(s.mode, mode);
    let client = client_messages(&mut s, true);
    let server = server_messages(&mut s, &client, true);
    let Msg::Request(r, slots) = &client[0] else {
        panic!("a request first")
    };
    assert!(r.twoway && slots.is_empty() && r.packets == 0 && r.slots == 0);
    let a = &server.accepts[0];
    assert_eq!(a.accept, 0);
    assert_eq!(server.start_ack, Some(0));
    assert!(matches!(client.last(), Some(Msg::Stop(h, _)) if h.accept == 0));
    let keys = test_keys(&s, &a.sid);
    let mut sent = Vec::new();
    for u in s.udp.iter().filter(|u| u.c2s) {
        assert_eq!(u.dst_port, a.port, "to the reflector's port");
        let mut b = u.data.clone();
        let f = packet::read_sender(mode, keys.as_ref(), &mut b).expect("sender packet");
        let mut again = u.data.clone();
        packet::write_sender(mode, keys.as_ref(), &f, &mut again);
        assert_eq!(again, u.data);
        sent.push(f);
    }
    let mut reflected: Vec<ReflectorFields> = Vec::new();
    for u in s.udp.iter().filter(|u| !u.c2s) {
        assert_eq!(
            u.data.len(),
            packet::reflected_len(mode, packet::sender_header(mode) + r.padding as usize)
        );
        let mut b = u.data.clone();
        let f = packet::read_reflector(mode, keys.as_ref(), &mut b).expect("reflector packet");
        let mut again = u.data.clone();
        packet::write_reflector(mode, keys.as_ref(), &f, &mut again);
        assert_eq!(
            again[..packet::reflector_header(mode)],
            u.data[..packet::reflector_header(mode)]
        );
        reflected.push(f);
    }
    assert_eq!(sent.len(), reflected.len());
    assert!(!sent.is_empty());
    for (i, f) in reflected.iter().enumerate() {
        assert_eq!(f.seq, i as u32, "the reflector numbers its own packets");
        let s0 = sent.iter().find(|x| x.seq == f.sender_seq).unwrap();
        assert_eq!((f.sender_timestamp, f.sender_error), (s0.timestamp, s0.error));
        assert_eq!(f.sender_ttl, 255);
        assert!(f.timestamp >= f.receive_timestamp && f.receive_timestamp >= s0.timestamp);
    }
}

#[test]
fn twping_open_mode() {
    twping("d1_twping_open.txt", Mode::Open);
}

#[test]
fn twping_authenticated_mode() {
    twping("d2_twping_auth.txt", Mode::Authenticated);
}

#[test]
fn twping_encrypted_mode() {
    twping("d3_twping_enc.txt", Mode::Encrypted);
}

#[test]
fn one_direction_sessions_parse_whole() {
    for name in ["e1_owping_to_only.txt", "e2_owping_from_only.txt"] {
        let mut s = open_session(name);
        let client = client_messages(&mut s, false);
        let server = server_messages(&mut s, &client, false);
        assert!(!server.accepts.is_empty(), "{name}");
        assert!(server.accepts.iter().all(|a| a.accept == 0), "{name}");
        assert!(s.c2s.done() && s.s2c.done(), "{name}: every octet accounted for");
    }
}

#[test]
fn refusals_carry_their_accept_codes() {
    // A wrong passphrase and an unknown identity: Server-Start Accept 1.
    for name in ["g2_owping_auth_unknown_user.txt", "g3_owping_auth_wrong_pass.txt"] {
        let s = open_session(name);
        assert_eq!(s.start_accept, 1, "{name}");
    }
    // A bandwidth limit: Accept-Session 1.
    let mut s = open_session("g1_owping_refused_bandwidth.txt");
    let m = read_request(&mut s.c2s, false);
    assert!(matches!(m, Msg::Request(..)));
    let mut b = s.s2c.blocks(2);
    b.extend([0u8; 16]);
    s.s2c.hmac("Accept-Session");
    assert_eq!(AcceptSession::decode(b[..].try_into().unwrap()).accept, 1);
    // An unknown SID: Fetch-Ack 1.
    let mut s = open_session("g4_owfetch_unknown_sid.txt");
    let client = client_messages(&mut s, false);
    let server = server_messages(&mut s, &client, false);
    assert_eq!(server.fetched[0].ack.accept, 1);
    assert!(server.fetched[0].records.is_empty());
}

#[test]
fn the_recorded_key_reads_as_pfstore_wrote_it() {
    let keys = pfs::parse("gptest\t676f6f647075742d746573742d70617373\n").unwrap();
    assert_eq!(keys[0].passphrase, PASSPHRASE);
}
