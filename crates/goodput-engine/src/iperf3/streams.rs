//! Data streams: the sending and receiving loops for TCP and UDP, the
//! end-condition budget shared by them, and the meter that turns their
//! counters into intervals and final figures.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use goodput_core::iperf3::udp::{Header, ReceiverStats};
use goodput_core::result::{Interval, Iperf3Interval, Iperf3StreamInterval, Iperf3UdpStats, TcpInfoSnapshot};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::monotonic_now;
use crate::lowat::LowWater;

/// One data stream's shared counters.
pub(crate) struct StreamState {
    pub(crate) id: u32,
    pub(crate) sender: bool,
    pub(crate) udp: bool,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    fd: RawFd,
    /// Bytes sent or received.
    pub(crate) bytes: AtomicU64,
    /// UDP datagrams sent (sender).
    pub(crate) packets: AtomicU64,
    /// UDP send calls that failed (sender).
    pub(crate) send_errors: AtomicU64,
    /// UDP receiver statistics.
    pub(crate) rx: Mutex<ReceiverStats>,
    /// The first error that stopped the stream.
    pub(crate) error: Mutex<Option<String>>,
    /// When data last arrived, ns after the data phase's start (0 = never).
    last_arrival_ns: AtomicU64,
    /// The test is ending: a TCP receiver keeps its low-water mark at 1.
    settling: AtomicBool,
}

impl StreamState {
    pub(crate) fn new(id: u32, sender: bool, sock: &DataSocket) -> Arc<Self> {
        let (local, remote, fd, udp) = match sock {
            DataSocket::Tcp(s) => (s.local_addr(), s.peer_addr(), s.as_raw_fd(), false),
            DataSocket::Udp(s) => (s.local_addr(), s.peer_addr(), s.as_raw_fd(), true),
            DataSocket::Gone => (
                Err(std::io::ErrorKind::NotConnected.into()),
                Err(std::io::ErrorKind::NotConnected.into()),
                -1,
                true,
            ),
        };
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        Arc::new(Self {
            id,
            sender,
            udp,
            local: local.unwrap_or(unspecified),
            remote: remote.unwrap_or(unspecified),
            fd,
            bytes: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
            rx: Mutex::new(ReceiverStats::default()),
            error: Mutex::new(None),
            last_arrival_ns: AtomicU64::new(0),
            settling: AtomicBool::new(false),
        })
    }

    fn arrived(&self, start: Instant) {
        self.last_arrival_ns
            .store(start.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Puts a TCP receiver's low-water mark back to 1, so the bytes still
    /// queued below it are read (the kernel wakes the reader) and counted.
    fn settle(&self) {
        self.settling.store(true, SeqCst);
        if !self.udp && !self.sender {
            crate::lowat::reset(self.fd);
        }
    }

    fn fail(&self, text: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        e.get_or_insert(text);
    }

    pub(crate) fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn rx_stats(&self) -> ReceiverStats {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// TCP_INFO of the stream's socket. Only called while the socket is
    /// open: the loops hand their sockets back instead of closing them.
    fn tcp_info(&self) -> Option<TcpInfoSnapshot> {
        struct Fd(RawFd);
        impl AsRawFd for Fd {
            fn as_raw_fd(&self) -> RawFd {
                self.0
            }
        }
        if self.udp {
            return None;
        }
        crate::socket::tcp_info(&Fd(self.fd)).ok()
    }
}

/// A data socket.
pub(crate) enum DataSocket {
    Tcp(TcpStream),
    Udp(UdpSocket),
    /// Lost in a failed hand-over to a blocking thread (the stream's error
    /// says why).
    Gone,
}

/// How often a blocked TCP call comes back to check for the stop.
const BLOCKING_TICK: Duration = Duration::from_millis(100);

/// TCP senders move data on a thread of their own with blocking calls, as
/// iperf3 3.16+ does: the kernel waits for buffer space inside one call
/// instead of a readiness round trip through the runtime per partial write
/// (measured: bench/run.sh iperf3, docs/benchmarks.md).
fn to_blocking(s: TcpStream, st: &StreamState) -> Option<std::net::TcpStream> {
    let std = s
        .into_std()
        .and_then(|t| {
            t.set_nonblocking(false)?;
            t.set_write_timeout(Some(BLOCKING_TICK))?;
            Ok(t)
        })
        .map_err(|e| st.fail(format!("socket setup: {e}")))
        .ok()?;
    Some(std)
}

fn from_blocking(r: Result<std::net::TcpStream, tokio::task::JoinError>, st: &StreamState) -> DataSocket {
    let back = r.map_err(std::io::Error::other).and_then(|t| {
        t.set_nonblocking(true)?;
        TcpStream::from_std(t)
    });
    match back {
        Ok(t) => DataSocket::Tcp(t),
        Err(e) => {
            st.fail(format!("socket hand-back: {e}"));
            DataSocket::Gone
        }
    }
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// One write of the rest of a claimed chunk, `at` bytes into it; moves
/// `at` on (`None` once the chunk is all out). `Ok(true)`: bytes moved;
/// `Ok(false)`: no room (timed out or would block); `Err`: the stream
/// failed and is marked so.
fn write_chunk(
    s: &mut std::net::TcpStream,
    st: &StreamState,
    chunk: &[u8],
    at: &mut Option<usize>,
) -> Result<bool, ()> {
    use std::io::Write;
    let off = at.unwrap_or(0);
    *at = Some(off);
    match s.write(&chunk[off..]) {
        Ok(0) => {
            st.fail("send: wrote 0 bytes".into());
            Err(())
        }
        Ok(n) => {
            st.bytes.fetch_add(n as u64, Relaxed);
            *at = (off + n < chunk.len()).then_some(off + n);
            Ok(true)
        }
        Err(e) if timed_out(&e) || e.kind() == std::io::ErrorKind::Interrupted => Ok(false),
        Err(e) => {
            st.fail(format!("send: {e}"));
            Err(())
        }
    }
}

fn send_blocking(
    mut s: std::net::TcpStream,
    st: &StreamState,
    plan: &DataPlan,
    budget: &Budget,
    stop: &CancellationToken,
    start: Instant,
) -> std::net::TcpStream {
    // Unpaced and unbudgeted streams write several blocks per call (blocks
    // are only a unit of account on a byte stream); budgeted ones claim and
    // write one block at a time, so -n and -k stay exact.
    let per_call = if plan.rate == 0 && !budget.limited() {
        (plan.payload.len() / plan.len).max(1)
    } else {
        1
    };
    let chunk = &plan.payload[..plan.len * per_call];
    // Where the stream is in its chunk; `None` until it has claimed the
    // chunk's blocks, so a write that times out empty does not claim again.
    let mut at: Option<usize> = None;
    while !stop.is_cancelled() {
        if at.is_none() {
            if plan.rate > 0 {
                let due = Duration::from_secs_f64(st.bytes.load(Relaxed) as f64 * 8.0 / plan.rate as f64);
                let now = start.elapsed();
                if due > now + Duration::from_millis(1) {
                    // Short naps, so a stop is seen within a tick.
                    std::thread::sleep((due - now).min(BLOCKING_TICK));
                    continue;
                }
            }
            if !budget.claim() {
                break;
            }
        }
        if write_chunk(&mut s, st, chunk, &mut at).is_err() {
            break;
        }
    }
    s
}

/// Threads for a test's unpaced TCP senders: half the CPUs, at least one,
/// at most one per stream. On loopback the receiving side needs CPUs too:
/// with one thread per stream on this 2-core machine, `-P 4` against a stock
/// server ran at 23–33 Gbit/s; with the senders kept on one CPU, 44–48
/// (docs/benchmarks.md, "iperf3 client: senders").
fn sender_threads(streams: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus / 2).clamp(1, streams.max(1))
}

/// Several unpaced TCP streams sent from one blocking thread: each socket
/// non-blocking, written in turn, and `poll` when none of them has room.
/// Blocks are claimed as [`send_blocking`] claims them.
fn send_group(
    mut socks: Vec<(std::net::TcpStream, Arc<StreamState>)>,
    plan: &DataPlan,
    budget: &Budget,
    stop: &CancellationToken,
) -> Vec<std::net::TcpStream> {
    use std::os::fd::AsRawFd;
    let per_call = if budget.limited() {
        1
    } else {
        (plan.payload.len() / plan.len).max(1)
    };
    let chunk = &plan.payload[..plan.len * per_call];
    let mut at: Vec<Option<usize>> = vec![None; socks.len()];
    let mut live = vec![true; socks.len()];
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(socks.len());
    while !stop.is_cancelled() && live.contains(&true) {
        let mut moved = false;
        for (i, (s, st)) in socks.iter_mut().enumerate() {
            if !live[i] {
                continue;
            }
            if at[i].is_none() {
                if !budget.claim() {
                    live[i] = false;
                    continue;
                }
                at[i] = Some(0);
            }
            match write_chunk(s, st, chunk, &mut at[i]) {
                Ok(m) => moved |= m,
                Err(()) => live[i] = false,
            }
        }
        if !moved {
            fds.clear();
            for (i, (s, _)) in socks.iter().enumerate() {
                if live[i] {
                    fds.push(libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    });
                }
            }
            // SAFETY: `fds` is a live array of `fds.len()` pollfd records.
            // The tick bounds the wait so a stop is seen; errors show on
            // the next write.
            unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    BLOCKING_TICK.as_millis() as libc::c_int,
                )
            };
        }
    }
    socks.into_iter().map(|(s, _)| s).collect()
}

/// Runs [`send_group`] on a blocking thread and hands the sockets back.
async fn run_sender_group(
    socks: Vec<(TcpStream, Arc<StreamState>)>,
    plan: Arc<DataPlan>,
    budget: Arc<Budget>,
    stop: CancellationToken,
) -> Vec<DataSocket> {
    let states: Vec<Arc<StreamState>> = socks.iter().map(|(_, st)| st.clone()).collect();
    let mut std_socks = Vec::new();
    for (s, st) in socks {
        // tokio hands its sockets over in non-blocking mode, as wanted here.
        match s.into_std() {
            Ok(t) => std_socks.push((t, st)),
            Err(e) => st.fail(format!("socket setup: {e}")),
        }
    }
    let done = tokio::task::spawn_blocking(move || send_group(std_socks, &plan, &budget, &stop)).await;
    match done {
        Ok(socks) => socks
            .into_iter()
            .zip(&states)
            .map(|(t, st)| from_blocking(Ok(t), st))
            .collect(),
        Err(e) => {
            for st in &states {
                st.fail(format!("sender thread: {e}"));
            }
            Vec::new()
        }
    }
}

/// The byte and block end conditions, shared by every stream of a test.
/// Senders claim a block before writing it, so the total sent is exactly the
/// limit rounded up to whole blocks; receivers count what arrives and wake
/// the controller when a limit is reached.
#[derive(Default)]
pub(crate) struct Budget {
    bytes: u64,
    blocks: u64,
    block_len: u64,
    claimed_bytes: AtomicU64,
    claimed_blocks: AtomicU64,
    received: AtomicU64,
    reached: AtomicBool,
    pub(crate) notify: Notify,
}

impl Budget {
    pub(crate) fn new(bytes: u64, blocks: u64, block_len: u64) -> Self {
        Self {
            bytes,
            blocks,
            block_len: block_len.max(1),
            ..Default::default()
        }
    }

    pub(crate) fn limited(&self) -> bool {
        self.bytes > 0 || self.blocks > 0
    }

    fn reach(&self) {
        if !self.reached.swap(true, Relaxed) {
            self.notify.notify_one();
        }
    }

    /// Whether a sender may write one more block.
    fn claim(&self) -> bool {
        if !self.limited() {
            return true;
        }
        let b = self.claimed_bytes.fetch_add(self.block_len, Relaxed);
        let k = self.claimed_blocks.fetch_add(1, Relaxed);
        let ok = (self.bytes == 0 || b < self.bytes) && (self.blocks == 0 || k < self.blocks);
        if !ok {
            self.reach();
        }
        ok
    }

    fn note_received(&self, n: u64) {
        if !self.limited() {
            return;
        }
        let total = self.received.fetch_add(n, Relaxed) + n;
        if (self.bytes > 0 && total >= self.bytes)
            || (self.blocks > 0 && total >= self.blocks * self.block_len)
        {
            self.reach();
        }
    }
}

/// How a test's streams move data.
pub(crate) struct DataPlan {
    pub(crate) len: usize,
    /// Per-stream rate, bits/s (0 = unlimited).
    pub(crate) rate: u64,
    pub(crate) wide_counters: bool,
    pub(crate) payload: Arc<[u8]>,
    /// The data phase's start, for arrival times.
    pub(crate) start: Instant,
    /// How TCP receivers wait for data.
    pub(crate) wait: RecvWait,
}

/// How an unpaced TCP receiver waits when its socket is empty. On loopback
/// the receiving side's kernel work runs on whichever CPU is in the socket
/// at the time: while a reader sleeps in epoll, the sender's CPU does it; a
/// reader inside `recvmsg` takes it over. Which pays depends on the number
/// of streams (docs/benchmarks.md, "iperf3 server: polling").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvWait {
    /// Sleep until readable (goodput's client receiving with `-R`).
    Sleep,
    /// Sleep, with the rate-following low-water mark (`crate::lowat`): one
    /// fast stream, woken once per large chunk.
    LowWater,
    /// Several fast streams: a fast stream's reader polls the socket a few
    /// hundred times, yielding to the other tasks between tries, before it
    /// sleeps.
    Poll,
}

/// Tries a fast stream's reader makes, yielding between them, before it
/// sleeps; at ~1 µs each, a few hundred microseconds of a quiet socket.
const POLLS: u16 = 200;
/// A stream is fast when it moved at least this much in its last
/// millisecond-long window (64 KiB/ms ≈ 0.5 Gbit/s): slower ones sleep.
const FAST_BYTES_PER_MS: u64 = 64 * 1024;

/// Whether a receiver's stream is fast enough to poll for.
#[derive(Default)]
struct Pace {
    window_start_ns: u64,
    window_bytes: u64,
    fast: bool,
    polls: u16,
}

impl Pace {
    fn after_read(&mut self, n: usize, now_ns: u64) {
        self.polls = 0;
        self.window_bytes += n as u64;
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed >= 1_000_000 {
            self.fast = self.window_bytes * 1_000_000 / elapsed >= FAST_BYTES_PER_MS;
            self.window_start_ns = now_ns;
            self.window_bytes = 0;
        }
    }

    /// True to try again instead of sleeping.
    fn poll_again(&mut self) -> bool {
        if self.fast && self.polls < POLLS {
            self.polls += 1;
            true
        } else {
            false
        }
    }
}

/// Payload length for blocks of `len`: whole blocks adding up to at least
/// 1 MiB, so unpaced TCP senders can write several per call (one stream on
/// loopback: 36 Gbit/s with 512 KiB calls, 47 with 1 MiB, 44 with 2 MiB).
fn payload_len(len: usize) -> usize {
    let len = len.max(1);
    len * ((1 << 20) / len).max(1)
}

/// Sleeps when the stream is ahead of its rate by a millisecond or more.
async fn pace(start: Instant, sent_bytes: u64, rate_bits: u64) {
    if rate_bits == 0 {
        return;
    }
    let due = Duration::from_secs_f64(sent_bytes as f64 * 8.0 / rate_bits as f64);
    let now = start.elapsed();
    if due > now + Duration::from_millis(1) {
        tokio::time::sleep(due - now).await;
    }
}

/// Sends until `stop`, the budget, or an error; hands the socket back open.
async fn run_sender(
    sock: DataSocket,
    st: Arc<StreamState>,
    plan: Arc<DataPlan>,
    budget: Arc<Budget>,
    stop: CancellationToken,
) -> DataSocket {
    let start = Instant::now();
    match sock {
        DataSocket::Tcp(s) => {
            let Some(std) = to_blocking(s, &st) else {
                return DataSocket::Gone;
            };
            let (st2, stop2) = (st.clone(), stop.clone());
            let done =
                tokio::task::spawn_blocking(move || send_blocking(std, &st2, &plan, &budget, &stop2, start));
            from_blocking(done.await, &st)
        }
        DataSocket::Gone => DataSocket::Gone,
        DataSocket::Udp(s) => {
            let mut buf = plan.payload[..plan.len].to_vec();
            let mut seq = 0u64;
            while !stop.is_cancelled() && budget.claim() {
                pace(start, st.bytes.load(Relaxed), plan.rate).await;
                let (sec, usec) = monotonic_now();
                seq += 1;
                Header {
                    sec: sec as u32,
                    usec,
                    seq,
                }
                .write(&mut buf, plan.wide_counters);
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    r = s.send(&buf) => match r {
                        Ok(n) => {
                            st.bytes.fetch_add(n as u64, Relaxed);
                            st.packets.fetch_add(1, Relaxed);
                        }
                        // The peer's port not (yet) open, or a full queue:
                        // count it and keep the schedule; the sequence number
                        // is not consumed (as iperf3 3.18+).
                        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOBUFS)) => {
                            seq -= 1;
                            st.send_errors.fetch_add(1, Relaxed);
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        Err(e) => {
                            st.fail(format!("send: {e}"));
                            break;
                        }
                    }
                }
            }
            DataSocket::Udp(s)
        }
    }
}

/// Receives until `close`, end of stream or an error; hands the socket back.
async fn run_receiver(
    sock: DataSocket,
    st: Arc<StreamState>,
    plan: Arc<DataPlan>,
    budget: Arc<Budget>,
    close: CancellationToken,
) -> DataSocket {
    match sock {
        // Receiving stays on the runtime, one task per stream: on loopback
        // a receiver that sleeps in epoll leaves the kernel's receive
        // processing to the sender's CPU, so it pays to use little of it;
        // threads per receiving stream measured no better (bench/run.sh
        // iperf3, docs/benchmarks.md).
        DataSocket::Tcp(s) => {
            let mut buf = vec![0u8; plan.len.clamp(256 * 1024, 1024 * 1024)];
            // The stream ends with the peer's FIN, which wakes the reader
            // whatever the mark, or with [`DataPhase::settle`].
            let mut low_water = if plan.wait == RecvWait::LowWater {
                LowWater::new(s.as_raw_fd())
            } else {
                LowWater::off()
            };
            let mut pace = Pace::default();
            let counted = |n: usize| {
                st.bytes.fetch_add(n as u64, Relaxed);
                budget.note_received(n as u64);
                st.arrived(plan.start);
            };
            // At the end, bytes below the mark may be waiting: they arrived
            // during the test, so they count.
            let drain = |buf: &mut [u8]| {
                while let Ok(n @ 1..) = s.try_read(buf) {
                    counted(n);
                }
            };
            loop {
                // Read while data is there; wait for readability only when
                // the socket is empty.
                match s.try_read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        counted(n);
                        let now_ns = plan.start.elapsed().as_nanos() as u64;
                        if plan.wait == RecvWait::Poll {
                            pace.after_read(n, now_ns);
                        }
                        if st.settling.load(SeqCst) {
                            low_water = LowWater::off();
                        } else {
                            low_water.after_read(n, now_ns, u64::MAX);
                        }
                        if close.is_cancelled() {
                            drain(&mut buf);
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        // A mark raised just after settle() lowered it
                        // goes back to 1 before this reader sleeps.
                        if st.settling.load(SeqCst) {
                            low_water = LowWater::off();
                        }
                        if !close.is_cancelled() && pace.poll_again() {
                            tokio::task::yield_now().await;
                            continue;
                        }
                        tokio::select! {
                            biased;
                            _ = close.cancelled() => {
                                drain(&mut buf);
                                break;
                            }
                            r = s.readable() => if let Err(e) = r {
                                st.fail(format!("recv: {e}"));
                                break;
                            }
                        }
                    }
                    Err(e) => {
                        st.fail(format!("recv: {e}"));
                        break;
                    }
                }
            }
            drop(low_water);
            DataSocket::Tcp(s)
        }
        DataSocket::Gone => DataSocket::Gone,
        DataSocket::Udp(s) => {
            let mut buf = vec![0u8; 65_536];
            loop {
                tokio::select! {
                    biased;
                    _ = close.cancelled() => break,
                    r = s.recv(&mut buf) => match r {
                        Ok(n) => {
                            let Some(h) = Header::read(&buf[..n], plan.wide_counters) else {
                                continue;
                            };
                            let (sec, usec) = monotonic_now();
                            let arrival = sec as f64 + f64::from(usec) / 1e6;
                            // The sender's seconds are truncated to 32 bits;
                            // only differences matter.
                            let arrival = arrival - ((sec >> 32) << 32) as f64;
                            st.rx
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .record(h.seq, n, h.time_s(), arrival);
                            st.bytes.fetch_add(n as u64, Relaxed);
                            budget.note_received(n as u64);
                            st.arrived(plan.start);
                        }
                        // An ICMP error from an earlier send to the peer.
                        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                        Err(e) => {
                            st.fail(format!("recv: {e}"));
                            break;
                        }
                    }
                }
            }
            DataSocket::Udp(s)
        }
    }
}

/// A test's data phase: every stream's loop running, the meter at zero.
/// Client and server drive it the same way; only what they wait for
/// differs.
pub(crate) struct DataPhase {
    pub(crate) start: Instant,
    cpu0: (f64, f64),
    pub(crate) meter: Meter,
    /// Stops the senders.
    pub(crate) stop: CancellationToken,
    close: CancellationToken,
    senders: Vec<tokio::task::JoinHandle<Vec<DataSocket>>>,
    receivers: Vec<tokio::task::JoinHandle<DataSocket>>,
}

/// The figures of a data phase, taken when it ended.
pub(crate) struct Figures {
    pub(crate) last: Interval,
    pub(crate) finals: Vec<StreamFinal>,
    pub(crate) errors: Vec<Option<String>>,
    pub(crate) cpu: goodput_core::result::CpuUtil,
    pub(crate) intervals: Vec<Iperf3Interval>,
    pub(crate) intervals_omitted: u64,
}

impl DataPhase {
    /// Starts a loop per stream (`sockets` in the order of `streams`).
    /// With `fast_receive`, unpaced TCP receivers wait as [`RecvWait`]
    /// says suits their number (a low-water mark for one, polling for
    /// several), and [`DataPhase::settle`] must be called before the final
    /// figures.
    pub(crate) fn start(
        p: &goodput_core::iperf3::params::Params,
        streams: &[Arc<StreamState>],
        sockets: Vec<DataSocket>,
        budget: Arc<Budget>,
        max_intervals: usize,
        fast_receive: bool,
    ) -> Self {
        let start = Instant::now();
        let cpu0 = super::cpu_times();
        let plan = Arc::new(DataPlan {
            len: p.len as usize,
            rate: p.bandwidth,
            wide_counters: p.udp_counters_64bit,
            payload: super::payload(payload_len(p.len as usize), p.repeating_payload),
            start,
            wait: if !fast_receive || p.bandwidth != 0 {
                RecvWait::Sleep
            } else if streams.iter().filter(|s| !s.sender).count() > 1 {
                RecvWait::Poll
            } else {
                RecvWait::LowWater
            },
        });
        // The meter's zero point is taken before any stream moves a byte.
        let omit = Duration::from_secs(u64::from(p.omit));
        let meter = Meter::new(streams.to_vec(), start, omit, max_intervals);
        let (stop, close) = (CancellationToken::new(), CancellationToken::new());
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        // Unpaced TCP senders share threads (`sender_threads`); a thread
        // with one stream keeps the blocking-write loop.
        let mut unpaced = Vec::new();
        for (sock, st) in sockets.into_iter().zip(streams) {
            let (st, plan, budget) = (st.clone(), plan.clone(), budget.clone());
            if st.sender {
                match sock {
                    DataSocket::Tcp(t) if plan.rate == 0 => unpaced.push((t, st)),
                    sock => {
                        let stop = stop.clone();
                        senders.push(tokio::spawn(async move {
                            vec![run_sender(sock, st, plan, budget, stop).await]
                        }));
                    }
                }
            } else {
                receivers.push(tokio::spawn(run_receiver(sock, st, plan, budget, close.clone())));
            }
        }
        let threads = sender_threads(unpaced.len());
        let mut groups: Vec<Vec<(TcpStream, Arc<StreamState>)>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, s) in unpaced.into_iter().enumerate() {
            groups[i % threads].push(s);
        }
        for mut g in groups.into_iter().filter(|g| !g.is_empty()) {
            let (plan, budget, stop) = (plan.clone(), budget.clone(), stop.clone());
            senders.push(if g.len() == 1 {
                let (t, st) = g.pop().expect("one stream");
                tokio::spawn(
                    async move { vec![run_sender(DataSocket::Tcp(t), st, plan, budget, stop).await] },
                )
            } else {
                tokio::spawn(run_sender_group(g, plan, budget, stop))
            });
        }
        Self {
            start,
            cpu0,
            meter,
            stop,
            close,
            senders,
            receivers,
        }
    }

    /// Status ticks every `every`, the first one `every` after the start.
    pub(crate) fn ticker(&self, every: Duration) -> tokio::time::Interval {
        let t0 = tokio::time::Instant::from_std(self.start);
        let mut t = tokio::time::interval_at(t0 + every, every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    }

    /// A sleep ending `after` the start.
    pub(crate) fn at(&self, after: Duration) -> tokio::time::Sleep {
        tokio::time::sleep_until(tokio::time::Instant::from_std(self.start) + after)
    }

    /// Waits for every sender to stop (after `stop`, or by its budget) and
    /// returns their sockets, still open.
    pub(crate) async fn join_senders(&mut self) -> Vec<DataSocket> {
        let mut held = Vec::new();
        for h in self.senders.drain(..) {
            if let Ok(s) = h.await {
                held.extend(s);
            }
        }
        held
    }

    /// The figures now: the last interval, final per-stream figures, the
    /// streams' errors so far and the CPU use.
    pub(crate) fn figures(&mut self) -> Figures {
        let last = self.meter.sample();
        let finals = self.meter.finish();
        Figures {
            last,
            finals,
            errors: self.meter.streams().iter().map(|s| s.error()).collect(),
            cpu: super::cpu_util(self.cpu0, super::cpu_times(), self.start.elapsed().as_secs_f64()),
            intervals: std::mem::take(&mut self.meter.intervals),
            intervals_omitted: self.meter.intervals_omitted,
        }
    }

    /// Lowers every TCP receiver's low-water mark back to 1 for the end of
    /// the test.
    pub(crate) fn settle(&self) {
        for st in self.meter.streams() {
            st.settle();
        }
    }

    /// Stops the receivers and waits for them.
    pub(crate) async fn close(self) {
        self.close.cancel();
        for h in self.receivers {
            let _ = h.await;
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Snap {
    bytes: u64,
    packets: u64,
    lost: u64,
    received: u64,
    retrans: u32,
}

/// Final per-stream figures (after the omit period).
#[derive(Debug, Clone)]
pub(crate) struct StreamFinal {
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
    pub(crate) retransmits: Option<u64>,
    pub(crate) udp: Option<Iperf3UdpStats>,
    pub(crate) tcp_info: Option<TcpInfoSnapshot>,
    pub(crate) max_cwnd: Option<u64>,
    pub(crate) rtt: Option<[u32; 3]>,
}

#[derive(Debug, Default, Clone, Copy)]
struct RttStats {
    n: u64,
    sum: u64,
    min: u32,
    max: u32,
    max_cwnd: u64,
}

/// Samples a test's streams: per-interval figures, the omit baseline and the
/// final figures.
pub(crate) struct Meter {
    streams: Vec<Arc<StreamState>>,
    start: Instant,
    omit: Duration,
    last: Vec<Snap>,
    last_t: f64,
    base: Vec<Snap>,
    rtt: Vec<RttStats>,
    pub(crate) intervals: Vec<Iperf3Interval>,
    pub(crate) intervals_omitted: u64,
    max_intervals: usize,
}

impl Meter {
    pub(crate) fn new(
        streams: Vec<Arc<StreamState>>,
        start: Instant,
        omit: Duration,
        max_intervals: usize,
    ) -> Self {
        let n = streams.len();
        let mut m = Self {
            streams,
            start,
            omit,
            last: vec![Snap::default(); n],
            last_t: 0.0,
            base: vec![Snap::default(); n],
            rtt: vec![RttStats::default(); n],
            intervals: Vec::new(),
            intervals_omitted: 0,
            max_intervals,
        };
        let now = m.snaps();
        m.last = now.clone();
        m.base = now;
        m
    }

    pub(crate) fn streams(&self) -> &[Arc<StreamState>] {
        &self.streams
    }

    fn snaps(&self) -> Vec<Snap> {
        self.streams
            .iter()
            .map(|s| {
                let mut snap = Snap {
                    bytes: s.bytes.load(Relaxed),
                    packets: s.packets.load(Relaxed),
                    ..Snap::default()
                };
                if s.udp && !s.sender {
                    let rx = s.rx_stats();
                    snap.packets = rx.highest;
                    snap.lost = rx.lost;
                    snap.received = rx.received;
                }
                if s.sender {
                    if let Some(ti) = s.tcp_info() {
                        snap.retrans = ti.total_retrans_segments;
                    }
                }
                snap
            })
            .collect()
    }

    /// The omit period ended: later figures count from here.
    pub(crate) fn end_omit(&mut self) {
        self.base = self.snaps();
    }

    /// One interval ending now; also the aggregate for goodput's views.
    pub(crate) fn sample(&mut self) -> Interval {
        let t = self.start.elapsed().as_secs_f64();
        let now = self.snaps();
        let mut streams = Vec::with_capacity(self.streams.len());
        let (mut sent, mut received) = (0u64, 0u64);
        for (i, s) in self.streams.iter().enumerate() {
            let (a, b) = (self.last[i], now[i]);
            let bytes = b.bytes - a.bytes;
            if s.sender {
                sent += bytes;
            } else {
                received += bytes;
            }
            let mut e = Iperf3StreamInterval {
                id: s.id,
                sender: s.sender,
                bytes,
                retransmits: None,
                snd_cwnd_bytes: None,
                rtt_us: None,
                rttvar_us: None,
                pmtu_bytes: None,
                packets: None,
                lost: None,
                jitter_ms: None,
            };
            if s.sender && !s.udp {
                if let Some(ti) = s.tcp_info() {
                    let cwnd = u64::from(ti.snd_cwnd_segments) * u64::from(ti.snd_mss_bytes);
                    e.retransmits = Some(u64::from(ti.total_retrans_segments.saturating_sub(a.retrans)));
                    e.snd_cwnd_bytes = Some(cwnd);
                    e.rtt_us = Some(ti.rtt_us);
                    e.rttvar_us = Some(ti.rttvar_us);
                    e.pmtu_bytes = ti.pmtu_bytes;
                    let r = &mut self.rtt[i];
                    if r.n == 0 || ti.rtt_us < r.min {
                        r.min = ti.rtt_us;
                    }
                    r.max = r.max.max(ti.rtt_us);
                    r.sum += u64::from(ti.rtt_us);
                    r.n += 1;
                    r.max_cwnd = r.max_cwnd.max(cwnd);
                }
            }
            if s.udp {
                if s.sender {
                    e.packets = Some(b.packets - a.packets);
                } else {
                    e.packets = Some(b.received - a.received);
                    e.lost = Some(b.lost.saturating_sub(a.lost));
                    e.jitter_ms = Some(s.rx_stats().jitter_s * 1000.0);
                }
            }
            streams.push(e);
        }
        let dt = t - self.last_t;
        let iv = Iperf3Interval {
            start_s: self.last_t,
            end_s: t,
            // An interval that began inside the omit period belongs to it.
            omitted: self.last_t < self.omit.as_secs_f64(),
            streams,
        };
        if self.intervals.len() < self.max_intervals {
            self.intervals.push(iv);
        } else {
            self.intervals_omitted += 1;
        }
        self.last = now;
        self.last_t = t;
        let rate = |b: u64| if dt > 0.0 { (b as f64 / dt) as u64 } else { 0 };
        Interval {
            time_slice_s: t,
            send_bytes_per_second: rate(sent),
            recv_bytes_per_second: rate(received),
            in_flight: self.streams.len() as u64,
            completed: 0,
            network_errors: 0,
            data_errors: 0,
            stamp: None,
            echo: None,
            media: None,
        }
    }

    /// Final figures, counted from the end of the omit period to now.
    pub(crate) fn finish(&self) -> Vec<StreamFinal> {
        let snaps = self.snaps();
        let now = self.start.elapsed();
        // A sender measures until it stopped (now); a receiver until its
        // last byte arrived, not the moment the figures are taken (a server
        // waits for the stream to go quiet first).
        let window = |s: &StreamState| {
            let last = Duration::from_nanos(s.last_arrival_ns.load(Relaxed));
            let end = if s.sender || last <= self.omit { now } else { last };
            end.saturating_sub(self.omit).as_secs_f64()
        };
        self.streams
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (a, b) = (self.base[i], snaps[i]);
                let ti = s.tcp_info();
                let tcp_sender = s.sender && !s.udp;
                let r = self.rtt[i];
                StreamFinal {
                    bytes: b.bytes - a.bytes,
                    seconds: window(s),
                    retransmits: tcp_sender.then(|| u64::from(b.retrans.saturating_sub(a.retrans))),
                    udp: s.udp.then(|| {
                        if s.sender {
                            Iperf3UdpStats {
                                packets: b.packets - a.packets,
                                ..Default::default()
                            }
                        } else {
                            let rx = s.rx_stats();
                            Iperf3UdpStats {
                                packets: b.packets.saturating_sub(a.packets),
                                lost: b.lost.saturating_sub(a.lost),
                                out_of_order: rx.out_of_order,
                                received: b.received - a.received,
                                jitter_ms: rx.jitter_s * 1000.0,
                            }
                        }
                    }),
                    tcp_info: ti,
                    max_cwnd: (tcp_sender && r.n > 0).then_some(r.max_cwnd),
                    rtt: (tcp_sender && r.n > 0).then(|| [r.min, (r.sum / r.n) as u32, r.max]),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fast_streams_poll_and_only_so_many_times() {
        let mut p = Pace::default();
        // 32 KiB over 1 ms: slow, so the reader sleeps at once.
        p.after_read(32 * 1024, 1_000_000);
        assert!(!p.poll_again());
        // 1 MiB over the next millisecond: fast.
        p.after_read(1 << 20, 2_000_000);
        let polls = (0..1000).take_while(|_| p.poll_again()).count();
        assert_eq!(polls, usize::from(POLLS));
        // Data resets the count; a long quiet spell makes it slow again.
        p.after_read(1, 2_100_000);
        assert!(p.poll_again());
        p.after_read(1, 500_000_000);
        assert!(!p.poll_again());
    }

    #[test]
    fn payload_is_whole_blocks_of_at_least_a_mebibyte() {
        assert_eq!(payload_len(128 * 1024), 1 << 20);
        assert_eq!(payload_len(1400), 1400 * 748);
        assert_eq!(payload_len(3 << 20), 3 << 20);
    }
}
