//! The `goodput` command line: flags → specs, views, signals, exit codes.

mod cli;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::Parser;
use goodput_core::media::limits::MediaLimits;
use goodput_core::media::MediaPlan;
use goodput_core::plan::TcpPattern;
use goodput_core::result::{ConnectionRecord, EndReason, Interval, StampPacket, TestResult};
use goodput_core::session::VerifyMode;
use goodput_core::units::{format_bits_per_second, format_size, ByteRate, ByteSize};
use goodput_engine::admission::AdmissionLimits;
use goodput_engine::media::{bind_media, run_media, MediaServerSpec, MediaSpec};
use goodput_engine::socket::{raise_open_file_limit, SocketOptions};
use goodput_engine::stamp::{bind_reflector, ReflectorSpec, StampSenderSpec};
use goodput_engine::tcp::{
    bind_server, run_client, CtsServerPlan, ServerLimits, ShutdownMode, TcpClientSpec, TcpServerSpec,
    WireProtocol,
};
use goodput_engine::{CancellationToken, EngineError, NullObserver, Observer};
use goodput_report::{ConnectionFile, ConsoleView, ErrorFile, JsonStream, StatusFile, Verbosity, View};

use cli::{
    Cli, Command, EchoArgs, Iperf3Args, OutputArgs, PatternArg, PatternArgs, QuicArgs, RunArgs, ServerArgs,
    ShutdownArg, SocketArgs, StampArgs, TcpArgs, TtcpArgs, UdpArgs, VerifyArg, ViewArgs, WireArg,
};
use goodput_core::spec::{Family, SocketSpec, SpecError, StampSpec, TcpSpec, TcpWire, TestSpec};

/// jemalloc rather than glibc's malloc, for the memory each connection
/// costs: tokio aligns every task and every socket registration to 128
/// bytes, and glibc pays for each such allocation with a fragment it seldom
/// reuses (docs/benchmarks.md, "Memory": 1.25 against 0.81 KiB per
/// established connection on the client, same build).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf`): one background thread gives
/// pages freed for a second back to the system, so the memory a burst of
/// connection setup used does not stay resident (by default jemalloc waits
/// ten seconds, and only purges while allocating).
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8; 85] =
    b"background_thread:true,max_background_threads:1,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// Exit status: every connection succeeded.
const EXIT_OK: u8 = 0;
/// Exit status: at least one connection failed (network or data error).
const EXIT_FAILED: u8 = 1;
/// Exit status: invalid flags or values (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// Exit status: the run could not start or could not write its outputs.
const EXIT_FATAL: u8 = 3;
/// Exit status: interrupted by SIGINT/SIGTERM (after the summary and files).
const EXIT_INTERRUPTED: u8 = 130;

/// Why the program stops early.
enum Stop {
    Usage(String),
    Fatal(anyhow::Error),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Self {
        Stop::Fatal(e)
    }
}

fn usage(msg: impl Into<String>) -> Stop {
    Stop::Usage(msg.into())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Schema { spec } => {
            let schema = if spec {
                goodput_report::spec_schema()
            } else {
                goodput_report::result_schema()
            };
            goodput_report::console_line(schema.trim_end());
            Ok(EXIT_OK)
        }
        Command::Completions { shell } => {
            let mut cmd = <cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "goodput", &mut io::stdout());
            Ok(EXIT_OK)
        }
        Command::Man { command } => man_page(command.as_deref()),
        Command::Tcp(args) => runtime().and_then(|rt| on_worker(&rt, tcp(*args))),
        Command::Run(args) => runtime().and_then(|rt| on_worker(&rt, run_document(*args))),
        Command::Server(args) => runtime().and_then(|rt| on_worker(&rt, server(*args))),
        Command::Iperf3(args) => runtime().and_then(|rt| on_worker(&rt, iperf3(*args))),
        Command::Stamp(args) => runtime().and_then(|rt| on_worker(&rt, stamp(*args))),
        Command::Ttcp(args) => runtime().and_then(|rt| on_worker(&rt, ttcp(*args))),
        Command::Echo(args) => runtime().and_then(|rt| on_worker(&rt, echo(*args))),
        Command::Udp(args) => runtime().and_then(|rt| on_worker(&rt, udp(*args))),
        Command::Quic(args) => runtime().and_then(|rt| on_worker(&rt, quic(*args))),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Stop::Usage(m)) => {
            eprintln!("goodput: error: {m}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Stop::Fatal(e)) => {
            eprintln!("goodput: error: {e:#}");
            ExitCode::from(EXIT_FATAL)
        }
    }
}

/// Prints goodput's man page, or one command's (`goodput-tcp(1)`).
fn man_page(command: Option<&str>) -> Result<u8, Stop> {
    let top = <cli::Cli as clap::CommandFactory>::command();
    let page = match command {
        None => top,
        Some(name) => {
            let sub = top.find_subcommand(name).cloned().ok_or_else(|| {
                let names: Vec<&str> = top.get_subcommands().map(|c| c.get_name()).collect();
                usage(format!(
                    "no command '{name}'; the commands are {}",
                    names.join(", ")
                ))
            })?;
            sub.display_name(format!("goodput-{name}"))
                .bin_name(format!("goodput {name}"))
                .version(env!("CARGO_PKG_VERSION"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Stop::Fatal(anyhow!("cannot render the man page: {e}")))?;
    io::Write::write_all(&mut io::stdout(), &out)
        .map_err(|e| Stop::Fatal(anyhow!("cannot write the man page: {e}")))?;
    Ok(EXIT_OK)
}

/// A client's exit status: failed (even if interrupted too), interrupted,
/// or fine.
fn exit_status(result: &TestResult, failed: bool) -> u8 {
    exit_code(result.end == EndReason::Interrupted, failed)
}

/// A failure wins over an interruption: the README's 130 means "stopped,
/// nothing failed".
fn exit_code(interrupted: bool, failed: bool) -> u8 {
    match (interrupted, failed) {
        (_, true) => EXIT_FAILED,
        (true, false) => EXIT_INTERRUPTED,
        (false, false) => EXIT_OK,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Stop> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Stop::Fatal)
}

/// Runs a command's future as a task on the runtime's workers rather than on
/// the main thread: the run loop then wakes (on every record, every freed
/// connection slot) as a task on a busy worker, not by a futex call that
/// unparks the main thread.
fn on_worker<F>(rt: &tokio::runtime::Runtime, fut: F) -> Result<u8, Stop>
where
    F: std::future::Future<Output = Result<u8, Stop>> + Send + 'static,
{
    rt.block_on(rt.spawn(fut))
        .unwrap_or_else(|e| Err(Stop::Fatal(anyhow::anyhow!("the run stopped abnormally: {e}"))))
}

/// Cancels `cancel` on the first SIGINT or SIGTERM; a second one exits at once.
fn watch_signals(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return,
        };
        for round in 0..2 {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if round == 0 {
                cancel.cancel();
            } else {
                eprintln!("goodput: second signal, exiting without waiting");
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
        }
    });
}

/// A server started on loopback for a run with no HOST, stopped after it.
struct Embedded {
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Embedded {
    /// Nothing running yet; stops with the run (`cancel`) or after it.
    fn new(run: &CancellationToken) -> Self {
        Self {
            cancel: run.child_token(),
            task: None,
        }
    }

    /// Runs `serve` (given the server's cancellation token) on the runtime.
    fn start<F>(&mut self, serve: impl FnOnce(CancellationToken) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.task = Some(tokio::spawn(serve(self.cancel.clone())));
    }

    /// Stops the server and waits for it.
    async fn stop(self) {
        self.cancel.cancel();
        if let Some(t) = self.task {
            let _ = t.await;
        }
    }
}

/// The most sockets the open-file limit leaves room for (after 64 for
/// everything else), each connection taking `per_connection`; `None` when
/// the limit cannot be read.
fn socket_room(per_connection: u64) -> Option<(u64, u64)> {
    raise_open_file_limit()
        .ok()
        .map(|limit| (limit.saturating_sub(64) / per_connection.max(1), limit))
}

/// Fails a run whose `flag` asks for more sockets than the open-file
/// limit allows.
fn check_socket_room(flag: &str, wanted: u64) -> Result<(), Stop> {
    match socket_room(1) {
        Some((room, limit)) if wanted > room => Err(usage(format!(
            "{flag} {wanted} needs a socket each; the open-file limit (RLIMIT_NOFILE) is {limit}"
        ))),
        _ => Ok(()),
    }
}

/// Fans the engine's events out to every view the user asked for. The first
/// write error is kept and reported at the end; the run is not disturbed.
struct Views {
    console: ConsoleView,
    files: Vec<Box<dyn View + Send>>,
    error: Option<io::Error>,
    /// The console's count of connections to expect, for `quiet`.
    finite: Option<u64>,
}

impl Views {
    fn open(out: &ViewArgs, finite: Option<u64>) -> Result<Self, Stop> {
        let mut files: Vec<Box<dyn View + Send>> = Vec::new();
        let open_err = |e: io::Error| Stop::Fatal(anyhow!(e));
        // The result document is written at the end; find out now, not
        // after a long run, that it cannot be.
        if let Some(p) = out.json.as_deref().filter(|p| !goodput_report::is_stdout(p)) {
            std::fs::File::create(p)
                .map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
        }
        if let Some(p) = &out.status_file {
            files.push(Box::new(StatusFile::create(p).map_err(open_err)?));
        }
        if let Some(p) = &out.connection_file {
            files.push(Box::new(ConnectionFile::create(p).map_err(open_err)?));
        }
        if let Some(p) = &out.error_file {
            let f = ErrorFile::create(p).map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidInput {
                    usage(e.to_string())
                } else {
                    open_err(e)
                }
            })?;
            files.push(Box::new(f));
        }
        if let Some(p) = &out.json_stream {
            files.push(Box::new(JsonStream::create(p).map_err(open_err)?));
        }
        // An output on standard output (`-`) replaces the console text there.
        let outputs = [
            &out.json,
            &out.json_stream,
            &out.status_file,
            &out.connection_file,
            &out.error_file,
        ];
        let verbosity = if outputs
            .iter()
            .any(|p| p.as_deref().is_some_and(goodput_report::is_stdout))
        {
            0
        } else {
            out.verbosity
        };
        Ok(Self {
            console: ConsoleView::new(Verbosity(verbosity), finite),
            files,
            error: None,
            finite,
        })
    }

    /// Silences the console when a command's own output flag takes standard
    /// output (`-`).
    fn quiet_if_stdout(&mut self, path: Option<&std::path::Path>) {
        if path.is_some_and(goodput_report::is_stdout) {
            self.console = ConsoleView::new(Verbosity(0), self.finite);
        }
    }

    /// Calls `f` on every view, keeping the first write error.
    fn each(&mut self, mut f: impl FnMut(&mut dyn View) -> io::Result<()>) {
        let mut first = f(&mut self.console).err();
        for v in &mut self.files {
            let r = f(v.as_mut());
            first = first.or(r.err());
        }
        if let Some(e) = first {
            self.error.get_or_insert(e);
        }
    }

    fn finish(&mut self, result: &TestResult, json: Option<&std::path::Path>) -> Result<(), Stop> {
        self.each(|v| v.finish(result));
        if let Some(p) = json {
            goodput_report::write_result_json(p, result)
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        match self.error.take() {
            Some(e) => Err(Stop::Fatal(anyhow!(e).context("writing an output file failed"))),
            None => Ok(()),
        }
    }
}

impl Observer for Views {
    fn on_interval(&mut self, iv: &Interval) {
        self.each(|v| v.interval(iv));
    }
    fn on_connection(&mut self, r: &ConnectionRecord) {
        self.each(|v| v.connection(r));
    }
    fn on_established(&mut self, index: u64, local: &str, remote: &str, t: f64) {
        self.each(|v| v.established(index, local, remote, t));
    }
    fn on_notice(&mut self, text: &str) {
        self.each(|v| v.notice(text));
    }
    fn wants_established(&self) -> bool {
        self.console.wants_established() || self.files.iter().any(|v| v.wants_established())
    }
    fn on_packet(&mut self, p: &StampPacket) {
        self.each(|v| if v.wants_packets() { v.packet(p) } else { Ok(()) });
    }
    fn wants_packets(&self) -> bool {
        self.files.iter().any(|v| v.wants_packets())
    }
}

fn pattern_of(p: PatternArg) -> TcpPattern {
    match p {
        PatternArg::Push => TcpPattern::Push,
        PatternArg::Pull => TcpPattern::Pull,
        PatternArg::Pushpull => TcpPattern::PushPull,
        PatternArg::Duplex => TcpPattern::Duplex,
    }
}

fn verify_of(v: VerifyArg) -> VerifyMode {
    match v {
        VerifyArg::Data => VerifyMode::Data,
        VerifyArg::Connection => VerifyMode::Connection,
    }
}

fn wire_of(w: WireArg) -> WireProtocol {
    match w {
        WireArg::Goodput => WireProtocol::Goodput,
        WireArg::Cts => WireProtocol::Cts,
    }
}

/// Largest I/O size goodput accepts (the shared pattern buffer is sized to it).
const MAX_BUFFER: u64 = 64 << 20;

fn check_data(d: &PatternArgs) -> Result<(), Stop> {
    goodput_core::spec::tcp::check_data(
        pattern_of(d.pattern),
        d.transfer,
        d.buffer,
        d.push_bytes,
        d.pull_bytes,
    )
    .map_err(|e| flag_error(&e))
}

fn socket_options(s: &SocketArgs) -> Result<SocketOptions, Stop> {
    let fits = |name: &str, v: Option<goodput_core::units::ByteSize>| -> Result<Option<u32>, Stop> {
        v.map(|b| u32::try_from(b.0).map_err(|_| usage(format!("{name} must be below 4 GiB"))))
            .transpose()
    };
    Ok(SocketOptions {
        send_buffer: fits("--send-buffer", s.send_buffer)?,
        recv_buffer: fits("--recv-buffer", s.recv_buffer)?,
        no_delay: s.no_delay,
        congestion: s.congestion.clone(),
        dscp: s.dscp,
        keepalive: s.keepalive.map(|d| d.0),
        interface: s.interface.clone(),
    })
}

fn check_output(o: &OutputArgs) -> Result<(), Stop> {
    goodput_core::spec::tcp::check_run(o.status_interval, o.idle_timeout, o.time_limit)
        .map_err(|e| flag_error(&e))
}

/// The addresses of `host` (a name or an address, either with `:PORT`,
/// `[v6]:PORT`, which overrides `port`), of the family asked for.
async fn resolve(host: &str, port: u16, v4: bool, v6: bool) -> Result<Vec<SocketAddr>, Stop> {
    let (host, port) = split_target(host, port)?;
    let host = host.as_str();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .with_context(|| format!("cannot resolve '{host}'"))?
            .collect(),
    };
    let mut out = Vec::new();
    for a in found {
        if (v4 && !a.is_ipv4()) || (v6 && !a.is_ipv6()) || out.contains(&a) {
            continue;
        }
        out.push(a);
    }
    if out.is_empty() {
        return Err(Stop::Fatal(anyhow!(
            "'{host}' has no {} address",
            if v4 { "IPv4" } else { "IPv6" }
        )));
    }
    Ok(out)
}

async fn tcp(args: TcpArgs) -> Result<u8, Stop> {
    let spec = tcp_spec(&args);
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Tcp(spec))?;
        return Ok(EXIT_OK);
    }
    run_tcp(spec, &args.output.views).await
}

/// Runs a validated TCP spec with the views `out` asks for: the one path
/// of `goodput tcp` and of a tcp test in `goodput run`.
async fn run_tcp(spec: TcpSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let document = TestSpec::Tcp(spec.clone());
    let socket = socket_options_of(&spec.socket);
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());

    let hosts = spec.hosts.clone();
    let embedded = hosts.is_empty();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut notices = Vec::new();

    // Every connection needs a descriptor here, two with the embedded server.
    let mut connections = spec.connections;
    let per_conn = if embedded { 2 } else { 1 };
    if let Some((room, limit)) = socket_room(per_conn) {
        if connections > room {
            notices.push(format!(
                "--connections {connections} capped to {room}: the open-file limit (RLIMIT_NOFILE) is {limit}"
            ));
            connections = room.max(1);
        }
    }

    let mut server = Embedded::new(&cancel);
    let targets = if embedded {
        let ip = loopback(v6);
        let server_spec = TcpServerSpec {
            wire: tcp_wire(spec.wire),
            cts: Some(CtsServerPlan {
                pattern: spec.pattern,
                verify: spec.verify,
                transfer: spec.transfer.hi.0,
                push_bytes: spec.push_bytes.0,
                pull_bytes: spec.pull_bytes.0,
                buffer: spec.buffer.hi.0,
            }),
            listen: vec![SocketAddr::new(ip, 0)],
            listen_defaulted: false,
            reuse_port: false,
            socket: socket.clone(),
            limits: ServerLimits {
                max_transfer: u64::MAX,
                max_buffer: MAX_BUFFER,
                max_duration: Duration::from_secs(u64::MAX / 4),
                // The embedded server's one client is this process.
                max_connections: u64::MAX,
                max_per_client: u64::MAX,
                max_pending: u64::MAX,
                max_pending_per_client: u64::MAX,
                ..ServerLimits::default()
            },
            exit_after: None,
            idle_timeout: spec.idle_timeout.0,
            status_interval: Duration::from_secs(3600),
            time_limit: None,
            max_records: 0,
        };
        let bound = bind_server(server_spec).map_err(|e| Stop::Fatal(e.into()))?;
        let addrs = bound.local_addrs();
        server.start(|c| async move {
            let _ = bound.run(&mut NullObserver, c).await;
        });
        addrs
    } else {
        let mut all = Vec::new();
        for h in &hosts {
            for a in resolve(h, spec.port, v4, v6).await? {
                if !all.contains(&a) {
                    all.push(a);
                }
            }
        }
        all
    };

    goodput_engine::socket::preflight_tcp(&targets, &spec.bind, &socket)
        .map_err(|e| Stop::Fatal(anyhow!("{e}")))?;
    let spec = TcpClientSpec {
        wire: tcp_wire(spec.wire),
        targets,
        binds: spec.bind.clone(),
        local_port: spec.local_port,
        pattern: spec.pattern,
        verify: spec.verify,
        transfer: spec.transfer,
        buffer: spec.buffer,
        push_bytes: spec.push_bytes.0,
        pull_bytes: spec.pull_bytes.0,
        rate_limit: spec.rate_limit,
        rate_period: spec.rate_period.0,
        burst: spec.burst_count.zip(spec.burst_delay.map(|d| d.0)),
        connections,
        iterations: spec.iterations,
        throttle: spec.throttle,
        shutdown: spec.shutdown,
        socket,
        idle_timeout: spec.idle_timeout.0,
        status_interval: spec.status_interval.0,
        time_limit: spec.time_limit.map(|d| d.0),
        max_records: out.max_records,
    };
    let finite = (spec.iterations > 0).then(|| spec.iterations.saturating_mul(spec.connections));
    let mut views = Views::open(out, finite)?;
    views.console.banner(
        "goodput tcp: configured settings",
        &client_banner(&spec, embedded),
    );
    for n in &notices {
        views.on_notice(n);
    }
    let result = run_client(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    Ok(if result.summary.failures() > 0 {
        EXIT_FAILED
    } else if result.end == EndReason::Interrupted {
        EXIT_INTERRUPTED
    } else {
        EXIT_OK
    })
}

/// The spec `goodput tcp`'s flags describe.
fn tcp_spec(args: &TcpArgs) -> TcpSpec {
    let mut hosts: Vec<String> = args.host.iter().cloned().collect();
    hosts.extend(args.target.iter().cloned());
    TcpSpec {
        hosts,
        port: args.port,
        family: if args.ipv4 {
            Family::Ipv4
        } else if args.ipv6 {
            Family::Ipv6
        } else {
            Family::Any
        },
        bind: args.bind.clone(),
        local_port: args.local_port,
        wire: match args.wire {
            WireArg::Goodput => TcpWire::Goodput,
            WireArg::Cts => TcpWire::Cts,
        },
        pattern: pattern_of(args.data.pattern),
        transfer: args.data.transfer,
        buffer: args.data.buffer,
        push_bytes: args.data.push_bytes,
        pull_bytes: args.data.pull_bytes,
        verify: verify_of(args.data.verify),
        rate_limit: args.rate_limit,
        rate_period: args.rate_period,
        burst_count: args.burst_count,
        burst_delay: args.burst_delay,
        connections: args.connections,
        iterations: args.iterations,
        throttle: args.throttle,
        shutdown: match args.shutdown {
            ShutdownArg::Graceful => ShutdownMode::Graceful,
            ShutdownArg::Rude => ShutdownMode::Rude,
            ShutdownArg::Random => ShutdownMode::Random,
        },
        socket: SocketSpec {
            send_buffer: args.socket.send_buffer,
            recv_buffer: args.socket.recv_buffer,
            no_delay: args.socket.no_delay,
            congestion: args.socket.congestion.clone(),
            dscp: args.socket.dscp,
            keepalive: args.socket.keepalive,
            interface: args.socket.interface.clone(),
        },
        time_limit: args.output.time_limit,
        status_interval: args.output.status_interval,
        idle_timeout: args.output.idle_timeout,
    }
}

fn tcp_wire(w: TcpWire) -> WireProtocol {
    match w {
        TcpWire::Goodput => WireProtocol::Goodput,
        TcpWire::Cts => WireProtocol::Cts,
    }
}

/// A validated spec's socket options (sizes were checked to fit 32 bits).
fn socket_options_of(s: &SocketSpec) -> SocketOptions {
    let fit = |v: Option<goodput_core::units::ByteSize>| v.and_then(|b| u32::try_from(b.0).ok());
    SocketOptions {
        send_buffer: fit(s.send_buffer),
        recv_buffer: fit(s.recv_buffer),
        no_delay: s.no_delay,
        congestion: s.congestion.clone(),
        dscp: s.dscp,
        keepalive: s.keepalive.map(|d| d.0),
        interface: s.interface.clone(),
    }
}

/// A spec's error in the flags' words: `tcp.connections` is
/// `--connections`, `socket.dscp` is `--dscp`, and a field a message names
/// (`` `rate_period` ``) is its flag too.
fn flag_error(e: &SpecError) -> Stop {
    let flag = |field: &str| {
        format!(
            "--{}",
            field.rsplit('.').next().unwrap_or(field).replace('_', "-")
        )
    };
    let field = e.field.split_once('.').map_or(e.field.as_str(), |(_, f)| f);
    let mut message = e.message.clone();
    while let Some(i) = message.find('`') {
        let Some(j) = message[i + 1..].find('`') else {
            break;
        };
        let name = message[i + 1..i + 1 + j].to_owned();
        message.replace_range(i..i + 2 + j, &flag(&name));
    }
    usage(format!("{} {message}", flag(field)))
}

/// Prints a spec as the JSON document `goodput run` reads.
fn print_spec(spec: &TestSpec) -> Result<(), Stop> {
    let text = serde_json::to_string_pretty(spec).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    goodput_report::console_line(&text);
    Ok(())
}

/// `goodput run FILE`: every test of the document, in order, each as its
/// command line would run it. With several tests, each output file gets
/// the test's number before its extension (`out.json` → `out-2.json`).
async fn run_document(args: RunArgs) -> Result<u8, Stop> {
    let from_stdin = goodput_report::is_stdout(&args.file);
    let text = if from_stdin {
        let mut t = String::new();
        io::Read::read_to_string(&mut io::stdin(), &mut t)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read standard input: {e}")))?;
        t
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read {}: {e}", args.file.display())))?
    };
    let toml = if from_stdin {
        !text.trim_start().starts_with(['{', '['])
    } else {
        args.file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    };
    let name = args.file.display().to_string();
    let specs = goodput_core::spec::read_document(&text, toml).map_err(|e| usage(format!("{name}: {e}")))?;
    let several = specs.len() > 1;
    let mut status = EXIT_OK;
    for (i, spec) in specs.into_iter().enumerate() {
        let views = numbered_views(&args.views, several.then_some(i + 1));
        let code = match spec {
            TestSpec::Tcp(t) => run_tcp(t, &views).await?,
            TestSpec::Stamp(t) => run_stamp(t, &views, None).await?,
        };
        if status == EXIT_OK {
            status = code;
        }
        if code == EXIT_INTERRUPTED {
            break;
        }
    }
    Ok(status)
}

/// The views of test `n` of several: each output file named with `-n`
/// before its extension (standard output stays as it is).
fn numbered_views(v: &ViewArgs, n: Option<usize>) -> ViewArgs {
    let number = |p: &Option<std::path::PathBuf>| -> Option<std::path::PathBuf> {
        let p = p.as_ref()?;
        let Some(n) = n.filter(|_| !goodput_report::is_stdout(p)) else {
            return Some(p.clone());
        };
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = match p.extension() {
            Some(e) => format!("{stem}-{n}.{}", e.to_string_lossy()),
            None => format!("{stem}-{n}"),
        };
        Some(p.with_file_name(name))
    };
    ViewArgs {
        verbosity: v.verbosity,
        status_file: number(&v.status_file),
        connection_file: number(&v.connection_file),
        error_file: number(&v.error_file),
        json: number(&v.json),
        json_stream: number(&v.json_stream),
        max_records: v.max_records,
    }
}

fn cts_plan(d: &PatternArgs) -> CtsServerPlan {
    CtsServerPlan {
        pattern: pattern_of(d.pattern),
        verify: verify_of(d.verify),
        transfer: d.transfer.hi.0,
        push_bytes: d.push_bytes.0,
        pull_bytes: d.pull_bytes.0,
        buffer: d.buffer.hi.0,
    }
}

fn client_banner(spec: &TcpClientSpec, embedded: bool) -> Vec<(String, String)> {
    let mut v = vec![
        (
            "Protocol".to_owned(),
            format!("TCP, {:?} wire", spec.wire).to_lowercase(),
        ),
        ("Pattern".into(), spec.pattern.name().into()),
    ];
    if spec.pattern == TcpPattern::PushPull {
        v.push((
            "Segments".into(),
            format!("push {} B, pull {} B", spec.push_bytes, spec.pull_bytes),
        ));
    }
    v.extend([
        (
            "Verification".into(),
            match spec.verify {
                VerifyMode::Data => "connections and data",
                VerifyMode::Connection => "connections",
            }
            .into(),
        ),
        (
            "Transfer per connection".into(),
            range_text(spec.transfer.lo.0, spec.transfer.hi.0),
        ),
        (
            "Buffer per send/recv".into(),
            range_text(spec.buffer.lo.0, spec.buffer.hi.0),
        ),
        (
            "Rate limit per connection".into(),
            match spec.rate_limit {
                None => "unlimited".into(),
                Some(r) if r.is_single() => {
                    format!("{} per {} ms", ByteRate(r.lo.0), spec.rate_period.as_millis())
                }
                Some(r) => format!(
                    "{}..{} B/s per {} ms",
                    r.lo.0,
                    r.hi.0,
                    spec.rate_period.as_millis()
                ),
            },
        ),
        ("Concurrent connections".into(), spec.connections.to_string()),
        (
            "Total connections".into(),
            if spec.iterations == 0 {
                "until stopped (iterations 0)".into()
            } else {
                format!(
                    "{} ({} × {} connections)",
                    spec.iterations * spec.connections,
                    spec.iterations,
                    spec.connections
                )
            },
        ),
        ("Connect throttle".into(), spec.throttle.to_string()),
        ("Shutdown".into(), format!("{:?}", spec.shutdown).to_lowercase()),
        (
            "Targets".into(),
            spec.targets
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
                + if embedded {
                    " (embedded loopback server)"
                } else {
                    ""
                },
        ),
    ]);
    if !spec.binds.is_empty() {
        v.push((
            "Bind".into(),
            spec.binds
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    v.push((
        "Status interval".into(),
        format!("{} ms", spec.status_interval.as_millis()),
    ));
    if let Some(t) = spec.time_limit {
        v.push(("Time limit".into(), format!("{} ms", t.as_millis())));
    }
    v
}

fn range_text(lo: u64, hi: u64) -> String {
    if lo == hi {
        let size = format_size(lo);
        // "1048576 B (1 MiB)"; a size that is not whole units already ends
        // with its exact count ("976.56 KiB (1000000 B)").
        if lo < 1024 || size.ends_with(" B)") {
            size
        } else {
            format!("{lo} B ({size})")
        }
    } else {
        format!("{lo}..{hi} B, picked per connection")
    }
}

fn listen_addrs(args: &ServerArgs) -> Result<(Vec<SocketAddr>, bool), Stop> {
    if args.listen.is_empty() || args.listen.iter().any(|l| l == "*") {
        let mut v = vec![
            SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), args.port),
            SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), args.port),
        ];
        for l in args.listen.iter().filter(|l| *l != "*") {
            v.push(parse_listen(l, args.port)?);
        }
        return Ok((v, true));
    }
    let v = args
        .listen
        .iter()
        .map(|l| parse_listen(l, args.port))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((v, false))
}

fn parse_listen(s: &str, port: u16) -> Result<SocketAddr, Stop> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, port))
        .map_err(|_| {
            usage(format!(
                "--listen '{s}': expected an IP address, optionally with :PORT ([v6]:PORT), or *"
            ))
        })
}

async fn server(args: ServerArgs) -> Result<u8, Stop> {
    check_output(&args.output)?;
    if args.wire == WireArg::Cts {
        check_data(&args.data)?;
        if !args.data.transfer.is_single() || !args.data.buffer.is_single() {
            return Err(usage(
                "--wire cts needs a single --transfer and --buffer (both ends must match)",
            ));
        }
    }
    if args.max_buffer.0 == 0 || args.max_buffer.0 > MAX_BUFFER {
        return Err(usage(format!(
            "--max-buffer must be between 1 byte and {}",
            format_size(MAX_BUFFER)
        )));
    }
    check_server_limits(&args)?;
    let socket = socket_options(&args.socket)?;
    let (listen, listen_defaulted) = listen_addrs(&args)?;
    let listen_for_services = listen.clone();
    let limit = raise_open_file_limit().ok();
    let defaults = AdmissionLimits::for_open_files(limit.unwrap_or(1024));
    let max_connections = args.max_connections.unwrap_or(defaults.max_connections);
    let max_per_client = args.max_per_client.unwrap_or(defaults.max_per_client);
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let spec = TcpServerSpec {
        wire: wire_of(args.wire),
        cts: (args.wire == WireArg::Cts).then(|| cts_plan(&args.data)),
        listen,
        listen_defaulted,
        reuse_port: args.reuse_port,
        socket,
        limits: ServerLimits {
            max_connections,
            max_per_client,
            max_transfer: args.max_transfer.0,
            max_buffer: args.max_buffer.0,
            max_duration: args.max_duration.0,
            max_pending: args.max_pending,
            max_pending_per_client: args.max_pending_per_client,
            hello_timeout: args.hello_timeout.0,
        },
        exit_after: args.exit_after,
        idle_timeout: args.output.idle_timeout.0,
        status_interval: args.output.status_interval.0,
        time_limit: args.output.time_limit.map(|d| d.0),
        max_records: args.output.views.max_records,
    };
    let bound = bind_server(spec).map_err(|e| Stop::Fatal(e.into()))?;
    let admission = bound.admission();
    let mut views = Views::open(&args.output.views, args.exit_after)?;
    let mut banner = vec![
        (
            "Listening on".to_owned(),
            bound
                .local_addrs()
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("Wire".into(), format!("{:?}", args.wire).to_lowercase()),
        (
            "Limits".into(),
            format!(
                "{} connections, {} per client ({} in their hello, {} per client, {} ms each), \
                 {} per connection, {} buffer, {} s per connection",
                max_connections,
                max_per_client,
                args.max_pending,
                args.max_pending_per_client,
                args.hello_timeout.0.as_millis(),
                format_size(args.max_transfer.0),
                format_size(args.max_buffer.0),
                args.max_duration.0.as_secs()
            ),
        ),
    ];
    if let Some(l) = limit {
        banner.push(("Open-file limit".into(), l.to_string()));
    }
    if let Some(n) = args.exit_after {
        banner.push(("Exit after".into(), format!("{n} connections")));
    }
    let iperf3 = match args.iperf3 {
        true => {
            let ip = args.iperf3_listen.unwrap_or(Ipv6Addr::UNSPECIFIED.into());
            let srv = goodput_engine::iperf3::bind_server(goodput_engine::iperf3::Iperf3ServerSpec {
                listen: SocketAddr::new(ip, args.iperf3_port),
                max_duration: args.iperf3_max_duration.0,
                timeout: Duration::from_secs(10),
                status_interval: Duration::from_secs(1),
                max_records: args.output.views.max_records,
                exit_after: None,
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            banner.push((
                "iperf3 service".into(),
                format!("{} (TCP, and UDP for UDP tests)", srv.local_addr()),
            ));
            Some(srv)
        }
        false => None,
    };
    let quic = if args.quic {
        let ips: Vec<IpAddr> = if args.quic_listen.is_empty() {
            vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()]
        } else {
            args.quic_listen.clone()
        };
        let spec = goodput_engine::quic::QuicServerSpec {
            listen: ips
                .iter()
                .map(|&ip| SocketAddr::new(ip, args.quic_port))
                .collect(),
            cert_key: args.cert.clone().zip(args.key.clone()),
            max_connections: args.quic_max_connections,
            max_per_client: args.quic_max_per_client,
            max_streams: 10_000,
            max_response: args.quic_max_response.0,
            retry: !args.quic_no_retry,
            max_handshakes: args.quic_max_handshakes,
            handshake_timeout: args.hello_timeout.0,
        };
        let q = goodput_engine::quic::bind_quic(spec).map_err(|e| Stop::Fatal(e.into()))?;
        banner.push((
            "QUIC perf service".into(),
            format!(
                "{} (ALPN perf; {}; {}; at most {} connections, {} per client, {} in their handshake \
                 for up to {} ms; responses up to {} B)",
                q.local_addrs()
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if args.cert.is_some() {
                    "certificate from --cert"
                } else {
                    "self-signed ECDSA P-256 certificate for localhost, generated now"
                },
                if args.quic_no_retry {
                    "no Retry: unvalidated addresses get up to 3x their bytes"
                } else {
                    "Retry before any state for an unvalidated address"
                },
                args.quic_max_connections,
                args.quic_max_per_client,
                args.quic_max_handshakes,
                args.hello_timeout.0.as_millis(),
                args.quic_max_response.0
            ),
        ));
        Some(q)
    } else {
        None
    };
    let media = if args.no_udp {
        None
    } else {
        let (limits, max_memory) = media_limits(&args)?;
        let spec = MediaServerSpec {
            listen: listen_for_services.clone(),
            max_streams: args.udp_max_streams,
            limits,
            max_memory,
        };
        let bound = match bind_media(spec.clone()) {
            Ok(b) => b,
            // The default :: may not exist (IPv6 disabled): serve IPv4.
            Err(_) if listen_defaulted => {
                let v4: Vec<SocketAddr> = spec.listen.iter().copied().filter(|a| a.is_ipv4()).collect();
                bind_media(MediaServerSpec { listen: v4, ..spec }).map_err(|e| Stop::Fatal(e.into()))?
            }
            Err(e) => return Err(Stop::Fatal(e.into())),
        };
        banner.push((
            "UDP media service".into(),
            format!(
                "{} (at most {} streams, {} per stream, {} fps, {} s long, {} ms buffer; \
                 {} of memory for streams, at most {} each)",
                bound
                    .local_addrs()
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                args.udp_max_streams,
                format_bits_per_second(limits.max_bits_per_second as f64 / 8.0),
                limits.max_frame_rate,
                limits.max_length_s,
                limits.max_buffer_ms,
                format_size(max_memory),
                format_size(limits.stream_ceiling())
            ),
        ));
        Some(bound)
    };
    let reflector = match args.stamp {
        true => {
            let listen = if args.stamp_listen.is_empty() {
                vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()]
            } else {
                args.stamp_listen.clone()
            };
            let r = bind_reflector(ReflectorSpec {
                listen: listen
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, args.stamp_port))
                    .collect(),
                stateful: args.stamp_stateful,
                allow: args.stamp_allow.clone(),
                per_source_rate: args.stamp_rate_limit,
                session_timeout: Duration::from_secs(300),
                pad_short: args.stamp_pad_short,
            })
            .map_err(|e| stamp_bind_error(e, args.stamp_port))?;
            banner.push((
                "STAMP reflector".into(),
                format!(
                    "{} (UDP, {}{}{}{})",
                    r.local_addrs()
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if args.stamp_stateful {
                        "stateful"
                    } else {
                        "stateless"
                    },
                    if args.stamp_allow.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", allow {}",
                            args.stamp_allow
                                .iter()
                                .map(|c| c.to_string())
                                .collect::<Vec<_>>()
                                .join(" ")
                        )
                    },
                    if args.stamp_rate_limit > 0 {
                        format!(", at most {} packets/s per source", args.stamp_rate_limit)
                    } else {
                        String::new()
                    },
                    if args.stamp_pad_short {
                        ", short requests padded to 44 B"
                    } else {
                        ""
                    }
                ),
            ));
            Some(r)
        }
        false => None,
    };
    let services = if args.discard_port.is_some() || args.echo_port.is_some() || args.echo_tls_port.is_some()
    {
        let ips: Vec<IpAddr> = listen_for_services.iter().map(|a| a.ip()).collect();
        let at = |port: Option<u16>| -> Vec<SocketAddr> {
            port.map(|p| ips.iter().map(|&ip| SocketAddr::new(ip, p)).collect())
                .unwrap_or_default()
        };
        let tls = match args.echo_tls_port {
            Some(_) => Some(
                goodput_engine::tls::server_config(args.cert.as_deref().zip(args.key.as_deref()))
                    .map_err(|e| Stop::Fatal(e.into()))?,
            ),
            None => None,
        };
        let s = goodput_engine::services::bind_services(
            &at(args.discard_port),
            &at(args.echo_port),
            &at(args.echo_tls_port),
            tls,
        )
        .map_err(|e| Stop::Fatal(e.into()))?;
        let list = |v: Vec<SocketAddr>| v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ");
        if args.discard_port.is_some() {
            banner.push((
                "Discard service".into(),
                format!("{} (TCP and UDP)", list(s.discard_addrs())),
            ));
        }
        if args.echo_port.is_some() {
            banner.push(("Echo service".into(), format!("{} (TCP)", list(s.echo_addrs()))));
        }
        if args.echo_tls_port.is_some() {
            banner.push((
                "TLS echo service".into(),
                format!(
                    "{} ({})",
                    list(s.echo_tls_addrs()),
                    if args.cert.is_some() {
                        "certificate from --cert"
                    } else {
                        "self-signed certificate for localhost, 127.0.0.1, ::1, generated now"
                    }
                ),
            ));
        }
        Some(s)
    } else {
        None
    };
    views.console.banner("goodput server", &banner);
    let services_run = async {
        match services {
            Some(s) => Some(s.run(cancel.clone(), admission.clone()).await),
            None => None,
        }
    };
    let iperf3_run = async {
        if let Some(srv) = iperf3 {
            let mut view = Iperf3ServerView {
                verbosity: args.output.views.verbosity,
            };
            srv.run(&mut view, cancel.clone()).await;
        }
    };
    let stamp_run = async {
        match reflector {
            Some(r) => Some(r.run(cancel.clone()).await),
            None => None,
        }
    };
    let media_run = async {
        match media {
            Some(m) => Some(m.run(cancel.clone()).await),
            None => None,
        }
    };
    let quic_run = async {
        match quic {
            Some(q) => Some(q.run(cancel.clone()).await),
            None => None,
        }
    };
    let tcp_run = async {
        let r = bound.run(&mut views, cancel.clone()).await;
        // The TCP server can end on its own (--exit-after, --time-limit):
        // the other services end with it.
        cancel.cancel();
        r
    };
    let (result, (), counters, served, streamed, quicked) =
        tokio::join!(tcp_run, iperf3_run, stamp_run, services_run, media_run, quic_run);
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    // Read again now that the discard and echo services have ended too.
    let adm = admission.counters();
    result.admission = Some(adm);
    let refused = adm.refused_total + adm.refused_per_client + adm.reset_pending + adm.hello_timeouts;
    if args.output.views.verbosity > 0 && (refused > 0 || adm.internal_errors > 0) {
        goodput_report::console_line(&format!(
            "Admission (TCP services): {} connections admitted; refused: {} over the total limit, \
             {} over the per-client limit, {} reset with too many in their hello, {} hellos or TLS \
             handshakes too slow; {} internal errors",
            adm.admitted,
            adm.refused_total,
            adm.refused_per_client,
            adm.reset_pending,
            adm.hello_timeouts,
            adm.internal_errors
        ));
    }
    if let (Some(c), true) = (served, args.output.views.verbosity > 0) {
        goodput_report::console_line(&format!(
            "Simple services: discard {} connections, {} datagrams, {} B; echo {} connections, {} B; {} failed TLS handshakes",
            c.discard_connections,
            c.discard_datagrams,
            c.discard_bytes,
            c.echo_connections,
            c.echo_bytes,
            c.tls_handshake_failures
        ));
    }
    if let Some(c) = counters {
        if args.output.views.verbosity > 0 {
            goodput_report::console_line(&format!(
                "STAMP reflector: {} received, {} reflected ({} short requests answered), \
                 dropped: {} under 14 B, {} over 9000 B, {} by the ACL, {} by the rate limit; \
                 {} with malformed TLVs, {} send errors, {} stateful sessions, {} internal errors",
                c.received,
                c.reflected,
                c.short_answered,
                c.too_short,
                c.oversized,
                c.denied,
                c.rate_limited,
                c.malformed_tlvs,
                c.send_errors,
                c.sessions,
                c.internal_errors
            ));
        }
        result.stamp_reflector = Some(c);
    }
    if let Some(c) = streamed {
        if args.output.views.verbosity > 0 && (c.accepted > 0 || c.challenged > 0 || c.unsolicited > 0) {
            goodput_report::console_line(&format!(
                "UDP media service: {} streams accepted ({} completed, {} stopped when their reports stopped), \
                 {} refused, {} challenges sent; {} data datagrams sent ({} send errors), {} received; \
                 {} unsolicited or malformed datagrams dropped; {} internal errors",
                c.accepted,
                c.completed,
                c.abandoned,
                c.rejected,
                c.challenged,
                c.sent,
                c.send_errors,
                c.received,
                c.unsolicited,
                c.internal_errors
            ));
        }
        result.media_server = Some(c);
    }
    if let Some(c) = quicked {
        if args.output.views.verbosity > 0 {
            goodput_report::console_line(&format!(
                "QUIC perf service: {} connections ({} refused, {} failed handshakes, {} handshakes \
                 timed out, {} internal errors; {} Retry packets sent, {} Initials dropped), {} streams \
                 ({} media, {} ended inside their header, {} refused, {} stopped by the client); \
                 {} B received, {} B sent, {} datagrams",
                c.connections,
                c.refused_connections,
                c.handshake_failures,
                c.handshake_timeouts,
                c.internal_errors,
                c.retries_sent,
                c.dropped_initials,
                c.streams,
                c.media_streams,
                c.short_requests,
                c.refused_streams,
                c.stopped,
                c.bytes_received,
                c.bytes_sent,
                c.datagrams_sent
            ));
        }
        result.quic_server = Some(c);
    }
    views.finish(&result, args.output.views.json.as_deref())?;
    Ok(if result.summary.failures() > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// Console lines for the tests an iperf3 service ran.
struct Iperf3ServerView {
    verbosity: u8,
}

impl Observer for Iperf3ServerView {
    fn on_interval(&mut self, _: &Interval) {}
    fn on_connection(&mut self, _: &ConnectionRecord) {}
    fn on_notice(&mut self, text: &str) {
        if self.verbosity >= 2 {
            goodput_report::console_line(text);
        }
    }
    fn on_result(&mut self, r: &TestResult) {
        if self.verbosity >= 1 {
            goodput_report::console_line(&goodput_report::iperf3_summary(r));
        }
    }
}

async fn iperf3(args: Iperf3Args) -> Result<u8, Stop> {
    use goodput_core::iperf3::params::{Params, Protocol};
    if args.interval.0 < Duration::from_millis(10) {
        return Err(usage("--interval must be at least 10ms"));
    }
    let protocol = if args.udp { Protocol::Udp } else { Protocol::Tcp };
    let mut p = Params::new(protocol);
    p.time = args.time;
    p.num = args.bytes.map_or(0, |b| b.0);
    p.blockcount = args.blockcount.unwrap_or(0);
    if p.num > 0 || p.blockcount > 0 {
        p.time = 0;
    } else if p.time == 0 {
        return Err(usage("-t must be at least 1 second (or give -n or -k)"));
    }
    p.omit = args.omit;
    p.parallel = args.parallel;
    // -l 0 means the default length, as stock iperf3 takes it.
    if let Some(l) = args.length.filter(|l| l.0 > 0) {
        p.len = u32::try_from(l.0).map_err(|_| usage("-l is too large"))?;
    }
    if let Some(b) = args.bitrate {
        p.bandwidth = b.0;
    }
    p.reverse = args.reverse;
    p.bidirectional = args.bidir;
    if let Some(w) = args.window {
        p.window = u32::try_from(w.0).map_err(|_| usage("-w is too large"))?;
    }
    p.mss = args.mss.unwrap_or(0);
    p.nodelay = args.no_delay;
    p.tos = args.tos;
    p.congestion = args.congestion.clone();
    p.get_server_output = args.get_server_output;
    p.udp_counters_64bit = args.udp_counters_64bit;
    p.repeating_payload = args.repeating_payload;
    p.title = args.title.clone();
    p.extra_data = args.extra_data.clone();
    p.client_version = Some(format!("goodput-{}", env!("CARGO_PKG_VERSION")));
    // The same checks a server makes, before anything is sent.
    Params::from_json(&p.to_json()).map_err(|e| usage(format!("invalid iperf3 parameters: {e}")))?;

    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let target = match &args.host {
        None => {
            let ip = loopback(args.ipv6);
            let srv = goodput_engine::iperf3::bind_server(goodput_engine::iperf3::Iperf3ServerSpec {
                listen: SocketAddr::new(ip, 0),
                max_duration: Duration::from_secs(86_400 + 600),
                timeout: Duration::from_secs(10),
                status_interval: args.interval.0,
                max_records: 0,
                exit_after: Some(1),
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = srv.local_addr();
            server.start(|c| async move {
                let _ = srv.run(&mut NullObserver, c).await;
            });
            addr
        }
        Some(h) => resolve(h, args.port, args.ipv4, args.ipv6).await?[0],
    };
    let out = &args.views;
    let mut views = Views::open(out, None)?;
    views.quiet_if_stdout(args.iperf3_json.as_deref());
    if let Some(path) = args.iperf3_json.as_ref().filter(|p| p.as_os_str() != "-") {
        std::fs::File::create(path)
            .map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", path.display())))?;
    }
    let mode = if p.bidirectional {
        "bidirectional"
    } else if p.reverse {
        "reverse (server sends)"
    } else {
        "forward (client sends)"
    };
    let end = if p.num > 0 {
        format!("after {}", format_size(p.num))
    } else if p.blockcount > 0 {
        format!("after {} blocks", p.blockcount)
    } else {
        format!("after {} s (+{} s omitted)", p.time, p.omit)
    };
    let mut banner = vec![
        (
            "Server".to_owned(),
            format!(
                "{target}{}",
                if args.host.is_none() {
                    " (embedded goodput iperf3 server)"
                } else {
                    ""
                }
            ),
        ),
        (
            "Protocol".into(),
            format!("iperf3 {}, {mode}", if args.udp { "UDP" } else { "TCP" }),
        ),
        ("Streams".into(), format!("{} per direction", p.parallel)),
        ("Block size".into(), format!("{} B", p.len)),
        ("Ends".into(), end),
    ];
    if p.bandwidth > 0 {
        banner.push((
            "Rate per stream".into(),
            format!(
                "{} bit/s ({})",
                p.bandwidth,
                format_bits_per_second(p.bandwidth as f64 / 8.0)
            ),
        ));
    }
    views.console.banner("goodput iperf3", &banner);
    let spec = goodput_engine::iperf3::Iperf3ClientSpec {
        target,
        bind: args.bind,
        cport: args.cport,
        params: p,
        status_interval: args.interval.0,
        timeout: args.timeout.0,
        max_records: args.views.max_records,
    };
    let result = goodput_engine::iperf3::run_client(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("goodput: iperf3 test failed: {e}");
            return Ok(if cancel.is_cancelled() {
                EXIT_INTERRUPTED
            } else {
                EXIT_FAILED
            });
        }
    };
    for r in &result.connections {
        views.on_connection(r);
    }
    views.finish(&result, out.json.as_deref())?;
    if let Some(path) = &args.iperf3_json {
        let text = serde_json::to_string_pretty(&goodput_report::iperf3_json(&result))
            .map_err(|e| Stop::Fatal(anyhow!(e)))?
            + "\n";
        if path.as_os_str() == "-" {
            goodput_report::console_line(text.trim_end());
        } else {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let failed = result.summary.failures() > 0 || result.iperf3.as_ref().is_some_and(|d| d.error.is_some());
    Ok(exit_status(&result, failed))
}

/// The loopback address of the chosen family, for embedded peers.
fn loopback(v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    }
}

/// A reflector that cannot bind: say how to get past a privileged port.
fn stamp_bind_error(e: EngineError, port: u16) -> Stop {
    if let EngineError::Listen { source, .. } = &e {
        if source.kind() == io::ErrorKind::PermissionDenied && port < 1024 {
            return Stop::Fatal(anyhow!(
                "{e}: {source}; port {port} needs root or CAP_NET_BIND_SERVICE (or use --stamp-port 8620)"
            ));
        }
    }
    Stop::Fatal(e.into())
}

async fn stamp(args: StampArgs) -> Result<u8, Stop> {
    let spec = StampSpec {
        host: args.host.clone(),
        port: args.port,
        interval: args.rate.is_none().then_some(args.interval),
        rate: args.rate,
        count: args.count,
        duration: args.duration,
        size: args.size,
        dscp: args.dscp,
        ssid: args.ssid,
        timeout: args.timeout,
        sessions: args.sessions,
        bind: args.bind,
        family: if args.ipv4 {
            Family::Ipv4
        } else if args.ipv6 {
            Family::Ipv6
        } else {
            Family::Any
        },
        stateful: args.stateful,
        status_interval: args.status_interval,
    };
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Stamp(spec))?;
        return Ok(EXIT_OK);
    }
    run_stamp(spec, &args.views, args.packet_file.as_deref()).await
}

/// Runs a validated STAMP spec: `goodput stamp`'s path and `goodput run`'s.
async fn run_stamp(
    spec: StampSpec,
    out: &ViewArgs,
    packet_file: Option<&std::path::Path>,
) -> Result<u8, Stop> {
    let document = TestSpec::Stamp(spec.clone());
    let interval = spec.packet_interval();
    let count = spec.packet_count();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut notices = Vec::new();
    check_socket_room("--sessions", u64::from(spec.sessions))?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let target = match &spec.host {
        None => {
            let ip = loopback(v6);
            let r = bind_reflector(ReflectorSpec {
                listen: vec![SocketAddr::new(ip, 0)],
                stateful: spec.stateful,
                allow: Vec::new(),
                per_source_rate: 0,
                session_timeout: Duration::from_secs(300),
                pad_short: false,
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = r.local_addrs()[0];
            server.start(|c| async move {
                r.run(c).await;
            });
            addr
        }
        Some(h) => resolve(h, spec.port, v4, v6).await?[0],
    };
    if interval < Duration::from_millis(1) && spec.sessions > 1 {
        notices.push(format!(
            "{} sessions at {:.0} packets/s each: the machine may not keep up; watch the loss figures",
            spec.sessions,
            1.0 / interval.as_secs_f64()
        ));
    }
    let mut views = Views::open(out, None)?;
    if let Some(p) = packet_file {
        let f = goodput_report::PacketFile::create(p).map_err(|e| Stop::Fatal(anyhow!(e)))?;
        views.files.push(Box::new(f));
    }
    views.quiet_if_stdout(packet_file);
    let ends = match (count, &spec.duration) {
        (Some(c), Some(d)) => format!("after {c} packets per session or {} s", d.0.as_secs_f64()),
        (Some(c), None) => format!("after {c} packets per session"),
        (None, Some(d)) => format!("after {} s", d.0.as_secs_f64()),
        (None, None) => unreachable!("a count is chosen when neither is given"),
    };
    let banner = vec![
        (
            "Reflector".to_owned(),
            format!(
                "{target}{}",
                if spec.host.is_none() {
                    format!(
                        " (embedded goodput reflector, {})",
                        if spec.stateful { "stateful" } else { "stateless" }
                    )
                } else {
                    String::new()
                }
            ),
        ),
        (
            "Sessions".into(),
            format!(
                "{}{}",
                spec.sessions,
                spec.ssid.map_or(String::new(), |s| format!(", SSID {s} upwards"))
            ),
        ),
        (
            "Packets".into(),
            format!(
                "{} B every {:.3} ms ({:.1} packets/s per session), DSCP {}, TTL 255",
                spec.size,
                interval.as_secs_f64() * 1e3,
                1.0 / interval.as_secs_f64(),
                spec.dscp
            ),
        ),
        ("Ends".into(), ends),
        (
            "Loss timeout".into(),
            format!("{} ms", spec.timeout.0.as_millis()),
        ),
    ];
    views.console.banner("goodput stamp", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let spec = StampSenderSpec {
        target,
        bind: spec.bind,
        sessions: spec.sessions,
        interval,
        count,
        duration: spec.duration.map(|d| d.0),
        packet_bytes: spec.size,
        dscp: spec.dscp,
        ssid: spec.ssid,
        timeout: spec.timeout.0,
        status_interval: spec.status_interval.0,
        max_records: out.max_records,
    };
    let result = goodput_engine::stamp::run_sender(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}

/// A limit of zero would refuse every client, or (for a duration) end
/// every connection at once: refused, naming the flag, rather than obeyed.
fn check_server_limits(args: &ServerArgs) -> Result<(), Stop> {
    let counts: [(&str, Option<u64>); 9] = [
        ("--max-connections", args.max_connections),
        ("--max-per-client", args.max_per_client),
        ("--max-pending", Some(args.max_pending)),
        ("--max-pending-per-client", Some(args.max_pending_per_client)),
        ("--udp-max-streams", Some(args.udp_max_streams as u64)),
        ("--udp-max-bitrate", Some(args.udp_max_bitrate.0)),
        ("--quic-max-connections", Some(args.quic_max_connections as u64)),
        ("--quic-max-per-client", Some(args.quic_max_per_client as u64)),
        ("--quic-max-handshakes", Some(args.quic_max_handshakes as u64)),
    ];
    if let Some((flag, _)) = counts.iter().find(|(_, v)| *v == Some(0)) {
        return Err(usage(format!("{flag} must be at least 1")));
    }
    if args.max_transfer.0 == 0 || args.quic_max_response.0 == 0 {
        let flag = if args.max_transfer.0 == 0 {
            "--max-transfer"
        } else {
            "--quic-max-response"
        };
        return Err(usage(format!("{flag} must be at least 1 byte")));
    }
    let durations = [
        ("--max-duration", args.max_duration.0),
        ("--hello-timeout", args.hello_timeout.0),
        ("--udp-max-length", args.udp_max_length.0),
        ("--udp-max-buffer", args.udp_max_buffer.0),
    ];
    if let Some((flag, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
        return Err(usage(format!("{flag} must be above zero")));
    }
    Ok(())
}

/// The media service's limits for `goodput server`, from its flags.
fn media_limits(args: &ServerArgs) -> Result<(MediaLimits, u64), Stop> {
    let length = args.udp_max_length.0;
    let max_length_s = u32::try_from(length.as_secs())
        .ok()
        .filter(|&s| s >= 1 && length.subsec_nanos() == 0)
        .ok_or_else(|| usage("--udp-max-length must be a whole number of seconds, 1s to 4294967295s"))?;
    let max_buffer_ms = u32::try_from(args.udp_max_buffer.0.as_millis())
        .ok()
        .filter(|&ms| ms >= 1)
        .ok_or_else(|| usage("--udp-max-buffer must be 1ms to 4294967295ms"))?;
    let max_memory = match args.udp_max_memory {
        Some(ByteSize(0)) => return Err(usage("--udp-max-memory must be above zero")),
        Some(ByteSize(b)) => b,
        None => physical_memory() / 8,
    };
    let limits = MediaLimits {
        max_bits_per_second: args.udp_max_bitrate.0,
        max_length_s,
        max_frame_rate: args.udp_max_frame_rate,
        max_buffer_ms,
    };
    Ok((limits, max_memory))
}

/// Physical memory, bytes (4 GiB when the system will not say).
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(size)) {
        (Ok(p), Ok(s)) if p > 0 && s > 0 => p.saturating_mul(s),
        _ => 4 << 30,
    }
}

async fn udp(args: UdpArgs) -> Result<u8, Stop> {
    let length = args.length.0;
    if length.subsec_nanos() != 0 || length.is_zero() || length.as_secs() > u64::from(u32::MAX) {
        return Err(usage("--length must be a whole number of seconds, at least 1s"));
    }
    if args.status_interval.0 < Duration::from_millis(10) {
        return Err(usage("--status-interval must be at least 10ms"));
    }
    if args.time_limit.is_some_and(|t| t.0.is_zero()) {
        return Err(usage("--time-limit must be above zero"));
    }
    if args.buffer_depth.0 > Duration::from_secs(3600) {
        return Err(usage("--buffer-depth must be at most 1h"));
    }
    let plan = MediaPlan::new(
        args.bitrate.0,
        args.frame_rate,
        length.as_secs() as u32,
        args.datagram_size,
    )
    .map_err(|e| usage(format!("--bitrate/--frame-rate/--length/--datagram-size: {e}")))?;
    // The receiver's ring (this client's for a download, the server's
    // for an upload) holds at most this many frames ahead of play-out.
    let buffered = (args.buffer_depth.0.as_millis() as u64).saturating_mul(u64::from(args.frame_rate)) / 1000;
    let most = goodput_core::media::receiver::MAX_BUFFERED_FRAMES;
    if buffered > u64::from(most) {
        return Err(usage(format!(
            "--buffer-depth × --frame-rate is {buffered} frames, more than a receiver buffers ({most})"
        )));
    }
    check_socket_room("--connections", u64::from(args.connections))?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let targets = match &args.host {
        None => {
            let ip = loopback(args.ipv6);
            // The embedded server takes what this client asks: the
            // client's own flags are checked below.
            let b = bind_media(MediaServerSpec {
                listen: vec![SocketAddr::new(ip, 0)],
                max_streams: 100_000,
                limits: MediaLimits {
                    max_bits_per_second: u64::MAX,
                    max_length_s: u32::MAX,
                    max_frame_rate: u32::MAX,
                    max_buffer_ms: u32::MAX,
                },
                max_memory: u64::MAX,
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = b.local_addrs()[0];
            server.start(|c| async move {
                b.run(c).await;
            });
            vec![addr]
        }
        Some(h) => resolve(h, args.port, args.ipv4, args.ipv6).await?,
    };
    let mut views = Views::open(
        &args.views,
        (args.iterations > 0).then(|| args.iterations.saturating_mul(u64::from(args.connections))),
    )?;
    views.quiet_if_stdout(args.jitter_file.as_deref());
    let jitter = match &args.jitter_file {
        Some(p) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            goodput_report::JitterFile::create(p).map_err(|e| Stop::Fatal(anyhow!(e)))?,
        ))),
        None => None,
    };
    let sink: Option<goodput_engine::media::DatagramSink> = jitter.clone().map(|f| {
        Box::new(move |d: &goodput_core::result::MediaDatagram| {
            if let Ok(mut f) = f.lock() {
                f.record(d);
            }
        }) as goodput_engine::media::DatagramSink
    });
    let dpf = plan.datagram_sizes().len();
    let banner = vec![
        (
            "Server".to_owned(),
            format!(
                "{}{}",
                targets
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if args.host.is_none() {
                    " (embedded goodput server)"
                } else {
                    ""
                }
            ),
        ),
        (
            "Direction".into(),
            if args.upload {
                "upload: this client streams, the server plays out".into()
            } else {
                "download: the server streams, this client plays out".into()
            },
        ),
        (
            "Stream".into(),
            format!(
                "{} b/s ({}; {} b/s delivered after rounding), {} fps, {} s = {} frames",
                plan.bits_per_second,
                format_bits_per_second(plan.bits_per_second as f64 / 8.0),
                plan.effective_bits_per_second(),
                plan.frame_rate,
                plan.length_s,
                plan.frames
            ),
        ),
        (
            "Frames".into(),
            format!(
                "{} B each, {} datagram(s) of at most {} B (34-byte header included), {} ms play-out buffer",
                plan.frame_bytes,
                dpf,
                plan.datagram_bytes,
                args.buffer_depth.0.as_millis()
            ),
        ),
        (
            "Streams".into(),
            format!(
                "{} at once, {}",
                args.connections,
                if args.iterations == 0 {
                    "repeated until --time-limit or Ctrl-C".to_string()
                } else {
                    format!(
                        "{} in turn each ({} in all)",
                        args.iterations,
                        args.iterations * u64::from(args.connections)
                    )
                }
            ),
        ),
        (
            "Verification".into(),
            match args.verify {
                VerifyArg::Data => "every payload against the pattern".into(),
                VerifyArg::Connection => "counts only".into(),
            },
        ),
        ("Total per stream".into(), format!("{} bytes", plan.total_bytes)),
    ];
    views.console.banner("goodput udp", &banner);
    let spec = MediaSpec {
        targets,
        bind: args.bind.clone(),
        plan,
        buffer_depth: args.buffer_depth.0,
        connections: args.connections,
        iterations: args.iterations,
        upload: args.upload,
        verify_data: args.verify == VerifyArg::Data,
        dscp: args.dscp,
        status_interval: args.status_interval.0,
        time_limit: args.time_limit.map(|d| d.0),
        max_records: args.views.max_records,
        datagram_sink: sink,
    };
    let result = run_media(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = result.map_err(|e| Stop::Fatal(e.into()))?;
    views.finish(&result, args.views.json.as_deref())?;
    if let (Some(f), Some(p)) = (jitter, &args.jitter_file) {
        let done = f
            .lock()
            .map_err(|_| anyhow!("the jitter file's writer failed"))?
            .finish();
        done.map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    Ok(exit_status(&result, result.summary.failures() > 0))
}

/// A size (`1GB`, `100MiB`) or, with a time unit, a duration (`10s`).
enum SizeOrTime {
    Size(u64),
    Time(Duration),
}

fn size_or_time(flag: &str, v: &str) -> Result<SizeOrTime, Stop> {
    let t = v.trim();
    let timed = ["ns", "us", "ms", "s", "m", "h"].iter().any(|u| {
        t.strip_suffix(u)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
    });
    if timed {
        let d: goodput_core::units::HumanDuration =
            t.parse().map_err(|e| usage(format!("{flag} '{v}': {e}")))?;
        if d.0.is_zero() {
            return Err(usage(format!("{flag} must be above zero")));
        }
        return Ok(SizeOrTime::Time(d.0));
    }
    let b: goodput_core::units::ByteSize = t.parse().map_err(|e| {
        usage(format!(
            "{flag} '{v}': expected a size (1GB, 100MiB) or a duration (10s): {e}"
        ))
    })?;
    Ok(SizeOrTime::Size(b.0))
}

async fn quic(args: QuicArgs) -> Result<u8, Stop> {
    use goodput_core::quic::scenario::Scenario;
    use goodput_engine::quic::{bind_quic, run_quic, QuicMode, QuicServerSpec, QuicSpec};
    use goodput_engine::tls::Trust;
    if args.status_interval.0 < Duration::from_millis(10) {
        return Err(usage("--status-interval must be at least 10ms"));
    }
    if args.duration.0.is_zero() {
        return Err(usage("--duration must be above zero"));
    }
    let scenario_of =
        |text: &str| Scenario::parse(text).map_err(|e| usage(format!("scenario '{text}': {e}")));
    let given = args.scenario.clone().or_else(|| args.scenario_flag.clone());
    let mut scenario_text = given.clone();
    let mut notices = Vec::new();
    let mode = if args.handshakes {
        QuicMode::Handshakes
    } else if args.rps || args.latency {
        QuicMode::Requests {
            streams: if args.latency { 1 } else { args.streams },
            request: args.request.0,
            response: args.response.0,
        }
    } else if let Some(u) = &args.upload {
        match size_or_time("--upload", u)? {
            SizeOrTime::Size(n) => {
                let text = format!("*1:{}:0;", n.saturating_add(8));
                scenario_text = Some(text.clone());
                QuicMode::Scenario(scenario_of(&text)?)
            }
            SizeOrTime::Time(d) => QuicMode::UploadFor(d),
        }
    } else if let Some(dl) = &args.download {
        match size_or_time("--download", dl)? {
            SizeOrTime::Size(n) => {
                let text = format!("*1:8:{n};");
                scenario_text = Some(text.clone());
                QuicMode::Scenario(scenario_of(&text)?)
            }
            SizeOrTime::Time(d) => QuicMode::DownloadFor(d),
        }
    } else {
        let text = given.clone().unwrap_or_else(|| "*1:8:100000000;".into());
        let s = scenario_of(&text)?;
        if s.legacy {
            notices.push(format!(
                "'{text}' is picoquic's legacy scenario form (current picoquic rejects it); running it as '{s}'"
            ));
        }
        scenario_text = Some(text);
        QuicMode::Scenario(s)
    };
    if let QuicMode::Scenario(s) = &mode {
        if args.uni
            && s.descs
                .iter()
                .any(|d| !matches!(d.body, goodput_core::quic::scenario::Body::Batch { .. }))
        {
            return Err(usage(
                "--uni applies to batch requests; media descriptions always use bidirectional streams",
            ));
        }
    }
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let (target, trust, name) = match &args.host {
        None => {
            let ip = loopback(args.ipv6);
            let b = bind_quic(QuicServerSpec {
                listen: vec![SocketAddr::new(ip, 0)],
                cert_key: None,
                max_connections: 100_000,
                max_per_client: 100_000,
                max_streams: 10_000,
                max_response: u64::MAX - 1,
                // Our own client on loopback: no round trip to validate it.
                retry: false,
                max_handshakes: 100_000,
                handshake_timeout: Duration::from_secs(10),
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = b.local_addrs()[0];
            server.start(|c| async move {
                b.run(c).await;
            });
            // Our own server's freshly generated certificate.
            (addr, Trust::Anything, "localhost".to_string())
        }
        Some(h) => {
            let addr = resolve(h, args.port, args.ipv4, args.ipv6).await?[0];
            let trust = match (&args.ca, args.insecure) {
                (Some(p), _) => Trust::CaFile(p.clone()),
                (None, true) => Trust::Anything,
                (None, false) => Trust::System,
            };
            let bare = h.trim_start_matches('[').trim_end_matches(']');
            let name = args.sni.clone().unwrap_or_else(|| {
                if bare.parse::<IpAddr>().is_ok() {
                    "localhost".into()
                } else {
                    bare.to_string()
                }
            });
            (addr, trust, name)
        }
    };
    // The log is appended to at the end; find out now that it cannot be.
    if let Some(p) = &args.perf_log {
        goodput_report::open_output(p, true).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    }
    let mut views = Views::open(&args.views, None)?;
    views.quiet_if_stdout(args.perf_log.as_deref());
    let what = match &mode {
        QuicMode::Scenario(s) => format!("scenario {s}"),
        QuicMode::UploadFor(d) => format!("upload for {:.3} s", d.as_secs_f64()),
        QuicMode::DownloadFor(d) => format!("download for {:.3} s (unlimited request, then STOP_SENDING)", d.as_secs_f64()),
        QuicMode::Requests { streams, request, response } => format!(
            "{} for {:.3} s: {streams} request(s) outstanding per connection, {request} B up (plus the 8-byte header), {response} B down",
            if args.latency { "latency" } else { "requests per second" },
            args.duration.0.as_secs_f64()
        ),
        QuicMode::Handshakes => format!("handshakes for {:.3} s", args.duration.0.as_secs_f64()),
    };
    let banner = vec![
        (
            "Server".to_owned(),
            format!(
                "{target} (TLS name {name}{}){}",
                match &trust {
                    Trust::Anything => ", any certificate accepted",
                    Trust::CaFile(_) => ", checked against --ca",
                    Trust::System => ", checked against the system's roots",
                },
                if args.host.is_none() {
                    ", embedded goodput server"
                } else {
                    ""
                }
            ),
        ),
        ("Runs".into(), what),
        ("Connections".into(), args.connections.to_string()),
    ];
    views.console.banner("goodput quic", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let spec = QuicSpec {
        target,
        server_name: name,
        trust,
        mode,
        connections: args.connections,
        duration: args.duration.0,
        uni: args.uni,
        scenario_text,
        status_interval: args.status_interval.0,
        max_records: args.views.max_records,
    };
    let result = run_quic(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = result.map_err(|e| Stop::Fatal(e.into()))?;
    if let Some(p) = &args.perf_log {
        goodput_report::append_perf_log(p, &result)
            .map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    views.finish(&result, args.views.json.as_deref())?;
    let failed = result.quic.as_ref().is_some_and(|q| q.failed_streams > 0) || result.summary.failures() > 0;
    Ok(exit_status(&result, failed))
}

async fn ttcp(args: TtcpArgs) -> Result<u8, Stop> {
    use goodput_engine::ttcp::{run_ttcp, TtcpRole, TtcpSpec};
    let min = if args.udp {
        goodput_core::ttcp::MIN_UDP_BUFLEN
    } else {
        1
    };
    if args.buflen < min || args.buflen > (64 << 20) {
        return Err(usage(format!("-l must be between {min} and {} bytes", 64 << 20)));
    }
    if args.udp && args.buflen > 65_507 {
        return Err(usage("-l with -u must be at most 65507 bytes (one UDP datagram)"));
    }
    if args.transmit && args.nbuf == 0 {
        return Err(usage("-n must be at least 1"));
    }
    let sockbuf = args
        .sockbuf
        .map(|b| u32::try_from(b.0).map_err(|_| usage("-b must be below 4 GiB")))
        .transpose()?;
    let role = match &args.host {
        Some(h) => TtcpRole::Transmit(resolve(h, args.port, args.ipv4, args.ipv6).await?[0]),
        None => {
            let ip = args.bind.unwrap_or(if args.ipv4 {
                Ipv4Addr::UNSPECIFIED.into()
            } else {
                Ipv6Addr::UNSPECIFIED.into()
            });
            TtcpRole::Receive(SocketAddr::new(ip, args.port))
        }
    };
    let spec = TtcpSpec {
        role,
        udp: args.udp,
        buflen: args.buflen,
        nbuf: args.nbuf,
        nodelay: args.nodelay,
        sockbuf,
        sinkmode: args.sinkmode,
        udp_idle: args.udp_idle.0,
        connect_timeout: Duration::from_secs(10),
    };
    // The report goes to standard output, unless standard output carries
    // the received data (--sinkmode=false -r): then it goes to stderr.
    let data_on_stdout = !args.sinkmode && !args.transmit;
    let verbosity = args.views.verbosity;
    let mut view_args = args.views;
    if data_on_stdout {
        view_args.verbosity = 0;
    }
    let mut views = Views::open(&view_args, None)?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let prefix = if args.transmit { "ttcp-t" } else { "ttcp-r" };
    if verbosity > 0 {
        eprintln!(
            "{prefix}: buflen={}, nbuf={}, port={}{}  {}{}",
            spec.buflen,
            spec.nbuf,
            args.port,
            sockbuf.map_or(String::new(), |b| format!(", sockbufsize={b}")),
            if args.udp { "udp" } else { "tcp" },
            args.host.as_ref().map_or(String::new(), |h| format!("  -> {h}"))
        );
    }
    let c = cancel.clone();
    let result = tokio::task::spawn_blocking(move || {
        let mut lines = |l: String| {
            if verbosity > 0 {
                eprintln!("{prefix}: {l}");
            }
        };
        run_ttcp(&spec, &mut lines, &c)
    })
    .await
    .map_err(|e| Stop::Fatal(anyhow!("the transfer thread failed: {e}")))?
    .map_err(|e| Stop::Fatal(e.into()))?;
    if data_on_stdout && verbosity > 0 {
        if let Some(d) = &result.ttcp {
            eprintln!("{}", goodput_report::ttcp_report(&result, d));
        }
    }
    for r in &result.connections {
        if !r.outcome.is_success() {
            views.on_connection(r);
        }
    }
    views.finish(&result, view_args.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}

/// `HOST:PORT`, `[v6]:PORT`, or a bare host with `default_port`.
fn split_target(t: &str, default_port: u16) -> Result<(String, u16), Stop> {
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok((a.ip().to_string(), a.port()));
    }
    if t.parse::<IpAddr>().is_ok()
        || t.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<Ipv6Addr>()
            .is_ok()
    {
        return Ok((t.to_owned(), default_port));
    }
    match t.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            let port = p
                .parse::<u16>()
                .map_err(|_| usage(format!("'{t}': the port must be a number 0-65535")))?;
            Ok((h.to_owned(), port))
        }
        _ => Ok((t.to_owned(), default_port)),
    }
}

async fn echo(args: EchoArgs) -> Result<u8, Stop> {
    use goodput_engine::echo::{run_echo, EchoSpec, Hold};
    let size = usize::try_from(args.message_size.0)
        .ok()
        .filter(|&n| (1..=(16 << 20)).contains(&n))
        .ok_or_else(|| usage("--message-size must be between 1 byte and 16 MiB"))?;
    if args.messages > 0 && args.message_rate.0.is_zero() && !args.send_after_recv {
        return Err(usage(
            "--message-rate 0 with an open-loop schedule would send every message at once; give a rate or --send-after-recv",
        ));
    }
    if args.status_interval.0 < Duration::from_millis(10) {
        return Err(usage("--status-interval must be at least 10ms"));
    }
    let hold = if args.pause {
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            Hold::Enter
        } else {
            match args.hold_for {
                Some(d) => Hold::For(d.0),
                None => return Err(usage(
                    "--pause waits for Enter, but standard input is not a terminal: give --hold-for DURATION",
                )),
            }
        }
    } else if let Some(d) = args.hold_for {
        Hold::For(d.0)
    } else if args.hold {
        Hold::UntilAllDone
    } else {
        Hold::No
    };
    let (host, port) = split_target(&args.target, args.port)?;
    let target = resolve(&host, port, args.ipv4, args.ipv6).await?[0];
    let tls = if args.tls {
        use goodput_engine::tls::{client_config, server_name, Trust};
        let trust = match (&args.ca, args.insecure) {
            (Some(p), _) => Trust::CaFile(p.clone()),
            (None, true) => Trust::Anything,
            (None, false) => {
                return Err(usage(
                    "--tls needs --ca FILE (the CA that signed the server's certificate) or --insecure",
                ))
            }
        };
        let cfg = client_config(&trust).map_err(|e| usage(e.to_string()))?;
        let name = args
            .sni
            .clone()
            .unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']').to_owned());
        Some((cfg, server_name(&name).map_err(|e| usage(e.to_string()))?))
    } else {
        None
    };
    let mut connections = args.connections;
    let mut notices = Vec::new();
    if let Some((room, limit)) = socket_room(1) {
        if connections > room {
            notices.push(format!(
                "--connections {connections} capped to {room}: the open-file limit (RLIMIT_NOFILE) is {limit}"
            ));
            connections = room.max(1);
        }
    }
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut views = Views::open(&args.views, Some(connections))?;
    let mut banner = vec![
        (
            "Echo server".to_owned(),
            format!(
                "{target}{}",
                match (&args.tls, &args.ca) {
                    (false, _) => String::new(),
                    (true, Some(ca)) => format!(" over TLS (trusting {})", ca.display()),
                    (true, None) => " over TLS (any certificate accepted: --insecure)".into(),
                }
            ),
        ),
        (
            "Connections".into(),
            format!(
                "{connections}, {}{}",
                if args.sync_connect {
                    "one at a time"
                } else {
                    "all at once"
                },
                args.batch_size.map_or(String::new(), |b| format!(
                    ", in batches of {b} every {} ms",
                    args.batch_delay.0.as_millis()
                ))
            ),
        ),
        (
            "Messages".into(),
            if args.messages == 0 {
                "none (connect only)".into()
            } else {
                format!(
                    "{} per connection, {} B each, every {} ms, {}",
                    args.messages,
                    size,
                    args.message_rate.0.as_millis(),
                    if args.send_after_recv {
                        "closed loop (timer starts when the echo is back)"
                    } else {
                        "open loop (round trips from the scheduled send time)"
                    }
                )
            },
        ),
    ];
    banner.push((
        "Close".into(),
        match hold {
            Hold::No => "each connection when its messages are done".into(),
            Hold::UntilAllDone => "all together when every connection is done".into(),
            Hold::Enter => "all together when Enter is pressed".into(),
            Hold::For(d) => format!("all together {} ms after every connection is done", d.as_millis()),
        },
    ));
    views.console.banner("goodput echo", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let spec = EchoSpec {
        target,
        connections,
        batch_size: args.batch_size,
        batch_delay: args.batch_delay.0,
        messages: args.messages,
        message_size: size,
        message_interval: args.message_rate.0,
        send_after_recv: args.send_after_recv,
        sync_connect: args.sync_connect,
        hold,
        connect_timeout: args.connect_timeout.0,
        reply_timeout: args.reply_timeout.0,
        status_interval: args.status_interval.0,
        max_records: args.views.max_records,
        tls,
        preallocate: args.preallocate,
    };
    let result = run_echo(spec, &mut views, cancel.clone())
        .await
        .map_err(|e| Stop::Fatal(e.into()))?;
    views.finish(&result, args.views.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_wins_over_an_interruption() {
        assert_eq!(exit_code(true, true), 1);
        assert_eq!(exit_code(true, false), 130);
        assert_eq!(exit_code(false, true), 1);
        assert_eq!(exit_code(false, false), 0);
    }
}
