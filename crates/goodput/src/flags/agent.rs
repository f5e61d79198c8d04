//! `goodput agent`'s flags.

use clap::{Args, Subcommand};
use goodput_core::kind::Kind;
use goodput_core::units::{ByteSize, HumanDuration};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The measurement agent: serves goodput's services as a beacon, runs its
/// share of a mesh's tests on schedule (booking each exclusive run's slot
/// with the agent at the other end), keeps every run in an archive, and
/// answers an HTTP API (`/api/v1`, `/metrics`). SIGHUP reloads the
/// configuration; a wrong one leaves the old schedule running.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct AgentArgs {
    /// The mesh configuration: a file (JSON, or TOML for a .toml name; `-`
    /// reads standard input with --check-config) or an http(s):// URL, read
    /// again every --reload-every (`URL#SHA256`: an https:// server whose
    /// certificate has that fingerprint, e.g. a fleet archive's
    /// /api/v1/fleet/config?host=NAME). A perfSONAR pSConfig template
    /// (told by its content), with its includes, is converted on every
    /// load, as import-psconfig converts it: e.g. a pSConfig Web Admin's
    /// https://HOST/pub/auto/THIS-HOST.
    #[arg(long, value_name = "FILE|URL", required_unless_present_any = ["print_fingerprint", "new_token"])]
    pub config: Option<String>,
    /// Check the configuration and print the tasks this host will run and
    /// with whom, then exit: status 2 if the configuration is wrong, 1 if
    /// the agent's runs would fail here (one `problem:` line each on
    /// standard error: no --token-file while this host has pairs with
    /// other agents, a host that is none of the mesh's addresses). A
    /// clock the kernel says is not synchronised, and a task whose runs
    /// would overlap themselves (a run longer than its repeat), are
    /// `warning:` lines.
    #[arg(long)]
    pub check_config: bool,
    /// Make a new mesh token (random, from the kernel) in a new file of
    /// mode 0600 (--out, default /etc/goodput/token), then exit; every
    /// agent of the mesh is given the same file with --token-file.
    #[arg(long, conflicts_with_all = ["check_config", "config"])]
    pub new_token: bool,
    /// Where --new-token writes the token.
    #[arg(long, value_name = "FILE", requires = "new_token")]
    pub out: Option<PathBuf>,
    /// Let --new-token replace an existing token file (the mesh's other
    /// agents then need the new one).
    #[arg(long, requires = "new_token")]
    pub force: bool,
    /// Print the SHA-256 fingerprint of the certificate this agent serves
    /// its API with (made and kept beside --archive on first use, unless
    /// --tls-cert), for `tls_sha256` in the configuration, then exit.
    #[arg(long, conflicts_with_all = ["check_config", "new_token"])]
    pub print_fingerprint: bool,
    /// The API's certificate chain (PEM), with --tls-key: used when this
    /// host's address has `tls_sha256` in the configuration (default: a
    /// self-signed one made once and kept beside the archive).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The API certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Who this host is: an address or a name from the configuration
    /// (repeatable; default: the addresses on this host's interfaces and
    /// its host name).
    #[arg(long = "as", value_name = "ADDRESS|NAME")]
    pub identity: Vec<String>,
    /// The archive (one SQLite file; a `.alive` file beside it notes when
    /// the agent was last up, to find the runs it missed).
    #[arg(long, value_name = "FILE", default_value = "/var/lib/goodput/archive.sqlite")]
    pub archive: PathBuf,
    /// `agent` (a host's: beacon, schedule, tests) or `archive` (a fleet's:
    /// stores the runs agents forward with --forward-to or the mesh's
    /// `archives`, and serves the
    /// dashboard, API and alerts over all of them; runs no tests; needs
    /// --token-file, the agents' token).
    #[arg(long, value_name = "ROLE", default_value = "agent", value_parser = ["agent", "archive"])]
    pub role: String,
    /// The fleet archive's database, for --role archive:
    /// postgres://USER:PASSWORD@HOST:PORT/DB (several archive processes may
    /// share one; over TLS add ?sslmode=verify-full&sslrootcert=CA.pem), or
    /// sqlite://PATH. Default: the --archive file.
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Forward every ended run to this fleet archive (repeatable): its
    /// API's URL, with `#SHA256` (its certificate's fingerprint) for an
    /// https:// one with a self-signed certificate. Runs wait in a queue in
    /// this agent's archive until the archive stores them; the token is
    /// --token-file's. The mesh document's `archives` add more (a fleet
    /// archive, or an HTTP receiver with a field transform).
    #[arg(long, value_name = "URL[#SHA256]")]
    pub forward_to: Vec<String>,
    /// Most runs queued for one archive; past it the oldest background
    /// runs are dropped first, then the oldest of any kind (logged and
    /// counted in /metrics).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub forward_backlog: u64,
    /// The lease this agent registers with its --forward-to archives for
    /// (renewed every third of it); an archive shows the agent down once
    /// it lapses.
    #[arg(long, value_name = "DURATION", default_value = "90s")]
    pub lease: HumanDuration,
    /// Where the API listens (repeatable; default: each of this host's
    /// configured addresses at the configuration's `agent.api_port`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub api_listen: Vec<SocketAddr>,
    /// Where the API also listens without TLS (repeatable; e.g.
    /// 127.0.0.1:8781 for a local Prometheus when the API is HTTPS).
    #[arg(long, value_name = "ADDR:PORT")]
    pub plain_api_listen: Vec<SocketAddr>,
    /// A file holding the mesh's shared token, which peers' bookings and
    /// every call that changes something must present (without one the
    /// agent takes no bookings from others).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Only these addresses may book runs or ask for them (repeatable,
    /// ADDRESS or ADDRESS/PREFIX; default: any address with the token).
    #[arg(long, value_name = "CIDR")]
    pub allow: Vec<String>,
    /// Requesters from CIDR may book exclusive (throughput) runs only
    /// between these times of day, UTC (repeatable; `10.0.0.0/8=00:00-06:00`;
    /// an end before the start spans midnight).
    #[arg(long, value_name = "CIDR=HH:MM-HH:MM")]
    pub window: Vec<String>,
    /// Do not serve the beacon (TCP test port and STAMP reflector).
    #[arg(long)]
    pub no_beacon: bool,
    /// The beacon's TCP test port (UDP media streams on the same number).
    #[arg(long, value_name = "PORT", default_value_t = 4444)]
    pub beacon_port: u16,
    /// The beacon's STAMP reflector port (UDP).
    #[arg(long, value_name = "PORT", default_value_t = 862)]
    pub stamp_port: u16,
    /// Serve iperf3 clients too (a stock iperf3 can test to this host).
    #[arg(long)]
    pub iperf3: bool,
    /// The iperf3 service's port.
    #[arg(long, value_name = "PORT", default_value_t = 5201)]
    pub iperf3_port: u16,
    /// Serve QUIC perf clients too.
    #[arg(long)]
    pub quic: bool,
    /// The QUIC perf service's UDP port.
    #[arg(long, value_name = "PORT", default_value_t = 4433)]
    pub quic_port: u16,
    /// Serve OWAMP too (as owampd: owping, powstream and perfSONAR's
    /// latency tests can measure to this host).
    #[arg(long)]
    pub owamp: bool,
    /// The OWAMP server's TCP port.
    #[arg(long, value_name = "PORT", default_value_t = 861)]
    pub owamp_port: u16,
    /// Serve TWAMP too (as twampd: twping and perfSONAR's rtt tests with
    /// protocol twamp); TCP beside the STAMP reflector's UDP port.
    #[arg(long)]
    pub twamp: bool,
    /// The TWAMP server's TCP port.
    #[arg(long, value_name = "PORT", default_value_t = 862)]
    pub twamp_port: u16,
    /// Serve M-Lab's ndt7 speed test too, and the /speedtest page that
    /// runs it from a browser (each browser's test is kept as a run).
    #[arg(long)]
    pub ndt7: bool,
    /// The ndt7 service's TCP port.
    #[arg(long, value_name = "PORT", default_value_t = goodput_core::spec::server::NDT7_PORT)]
    pub ndt7_port: u16,
    /// Answer perfSONAR pScheduler leads here (HTTPS, under /pscheduler;
    /// repeatable; e.g. [::]:443): a perfSONAR host can then run
    /// `pscheduler task throughput --dest THIS_HOST` (tool iperf3). Off
    /// unless given.
    #[arg(long, value_name = "ADDR:PORT")]
    pub pscheduler_listen: Vec<SocketAddr>,
    /// The pScheduler leads that may use --pscheduler-listen (repeatable,
    /// ADDRESS or ADDRESS/PREFIX; default: the --allow list; one of the
    /// two is needed, as pScheduler's API has no token).
    #[arg(long, value_name = "CIDR")]
    pub pscheduler_allow: Vec<String>,
    /// The TCP port a pScheduler run's iperf3 server listens on, for that
    /// run's slot only.
    #[arg(long, value_name = "PORT", default_value_t = 5201)]
    pub pscheduler_iperf3_port: u16,
    /// Most pScheduler tasks one lead keeps here at once.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub pscheduler_max_tasks: usize,
    /// Most runs booked by others held at once.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub max_held: usize,
    /// Most runs under way on this host at once, background runs (STAMP,
    /// OWAMP, TWAMP, trace and ping) aside.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_running: usize,
    /// Most background runs (STAMP, OWAMP, TWAMP: a few small packets a
    /// second each; trace and ping) under way on this host at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_background: usize,
    /// Most runs one requester may book per hour.
    #[arg(long, value_name = "N", default_value_t = 720)]
    pub runs_per_hour: u32,
    /// Most exclusive (throughput) time one requester may book per day.
    #[arg(long, value_name = "DURATION", default_value = "6h")]
    pub exclusive_per_day: HumanDuration,
    /// Longest run a requester may book.
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub max_run_length: HumanDuration,
    /// The highest rate an on-demand run of KIND may ask for (repeatable;
    /// `udp=100Mbit`; a run of that kind with no rate of its own is
    /// refused).
    #[arg(long, value_name = "KIND=RATE")]
    pub max_bitrate: Vec<String>,
    /// How often a configuration URL is read again.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub reload_every: HumanDuration,
    /// Runs older than this leave the archive (default 548 days).
    #[arg(long, value_name = "DURATION", default_value = "13152h")]
    pub keep: HumanDuration,
    /// The archive's data never grows past this; the oldest runs go first
    /// (default 1GiB for an agent's SQLite file, 100GiB for a fleet
    /// archive's database).
    #[arg(long, value_name = "BYTES")]
    pub archive_limit: Option<ByteSize>,
    /// The largest request body the API reads (a booking, a forwarded
    /// batch, a pScheduler result); larger ones get 413. At least 64KiB.
    #[arg(long, value_name = "BYTES", default_value = "4MiB")]
    pub max_body: ByteSize,
    /// Most records one requester may write a minute (results handed
    /// over, pScheduler results, fleet registrations; past it: 429).
    #[arg(long, value_name = "N", default_value_t = 600)]
    pub writes_per_minute: u32,
    /// Most forwarded runs one agent may send a fleet archive a minute
    /// (past it the batch gets 429 and is sent again later).
    #[arg(long, value_name = "N", default_value_t = 60_000)]
    pub ingest_per_minute: u32,
    /// Most API requests handled at once in each of two pools: the mesh's
    /// agents and token holders, and everyone else (past it: 503).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_requests: usize,
    /// Most API connections open at once (also held to half the process's
    /// descriptor limit). When all are taken, an address holding few
    /// takes the place of one holding the most.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_connections: usize,
    /// Most API connections one source address may hold at once.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_connections_per_address: usize,
    /// Most API requests of one source address handled at once (past it:
    /// 429).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub max_requests_per_address: usize,
    /// Longest wait for a request's headers, and so the longest an idle
    /// API connection stays open.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub header_timeout: HumanDuration,
    /// Longest wait for a request body, plus 1 s per 64 KiB it announces
    /// (past it: 408 and the connection closed).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub body_timeout: HumanDuration,
    #[command(subcommand)]
    pub action: Option<AgentAction>,
}

/// What `goodput agent` does besides running.
#[derive(Debug, Subcommand)]
pub enum AgentAction {
    /// Ask an agent to run a test now (or at the first slot free on both
    /// ends), wait for it, and print its result's figures.
    Run(AgentRunArgs),
    /// Convert a perfSONAR pSConfig template into goodput's mesh
    /// configuration (TOML): throughput → tcp (or iperf3), latency →
    /// owamp (as owping), latencybg → a continuous owamp stream (as
    /// powstream), rtt → ping (or stamp; twamp when the test asks for
    /// TWAMP or twping), trace → trace. Each thing
    /// that could not be carried over is named, on standard error and as a
    /// comment at the top of the output.
    ImportPsconfig(ImportPsconfigArgs),
}

/// `goodput agent import-psconfig`'s flags.
#[derive(Debug, Args)]
pub struct ImportPsconfigArgs {
    /// The template: a JSON file or an http(s):// URL (its `includes`,
    /// files or URLs, are read and merged as pSConfig merges them).
    #[arg(value_name = "FILE|URL")]
    pub template: String,
    /// Write the configuration here instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// What throughput tests become: tcp (goodput's own, against the
    /// agents' services) or iperf3 (UDP throughput is always iperf3).
    #[arg(long, value_name = "KIND", default_value = Kind::Tcp.name(),
          value_parser = [Kind::Tcp.name(), Kind::Iperf3.name()])]
    pub throughput: String,
    /// What rtt tests become: ping (ICMP echo or TCP connect) or stamp.
    #[arg(long, value_name = "KIND", default_value = Kind::Ping.name(),
          value_parser = [Kind::Ping.name(), Kind::Stamp.name()])]
    pub rtt: String,
}

/// `goodput agent run`'s flags.
#[derive(Debug, Args)]
pub struct AgentRunArgs {
    /// The agent that runs the test (it is the source): its API's URL.
    #[arg(long, value_name = "URL")]
    pub agent: String,
    /// A file holding the mesh's shared token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The agent's certificate fingerprint (SHA-256, its `tls_sha256`),
    /// for an https:// agent: only that certificate is accepted.
    #[arg(long, value_name = "SHA256")]
    pub pin: Option<String>,
    /// The name of the configured address the spec tests to, as a check
    /// (the spec's host must be an address of the mesh either way; its
    /// agent, if it has one, books the slot too).
    #[arg(long, value_name = "NAME")]
    pub dest: Option<String>,
    /// How late the run may start.
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    pub slip: HumanDuration,
    /// Print the whole run (with its result document) as JSON.
    #[arg(long)]
    pub json: bool,
    /// The test: a spec document (JSON or TOML; `-` reads standard input),
    /// with its host filled in: an address of the agent's mesh.
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,
}
