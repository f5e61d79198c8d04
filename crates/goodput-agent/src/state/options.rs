//! How an agent runs: what the command line gives it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use goodput_archive::Retention;

use crate::limits::{ConnLimits, Limits};
use crate::state::config::ConfigSource;
use crate::state::forward::ForwardTarget;

/// What the process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A host's agent: beacon, schedule, tests, its own archive.
    #[default]
    Agent,
    /// A fleet's archive: takes the runs agents forward, serves the
    /// dashboard, API and alerts over all of them; runs no tests.
    Archive,
}

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// An agent, or a fleet's archive.
    pub role: Role,
    /// The archive's database instead of the `archive` file:
    /// `postgres://…` (a fleet's), or `sqlite://PATH`.
    pub database: Option<String>,
    /// The archives every ended run is forwarded to.
    pub forward: Vec<ForwardTarget>,
    /// Most runs queued for one forwarding target; past it the oldest
    /// background runs are dropped first, and the drop is logged and
    /// counted.
    pub forward_backlog: u64,
    /// The lease this agent registers with its archives for: renewed every
    /// third of it; an archive shows the agent down once it lapses.
    pub lease: Duration,
    /// Where the mesh configuration comes from.
    pub config: ConfigSource,
    /// Who this host is: addresses or names from the configuration (empty:
    /// the addresses on its interfaces and its host name).
    pub identities: Vec<String>,
    /// The archive file (SQLite).
    pub archive: PathBuf,
    /// Where the API listens (empty: each of this host's configured
    /// addresses at the mesh's `agent.api_port`). HTTPS when this host's
    /// address has `tls_sha256` in the configuration.
    pub api_listen: Vec<SocketAddr>,
    /// Where the API also listens without TLS (a loopback address for a
    /// local Prometheus, say).
    pub plain_api_listen: Vec<SocketAddr>,
    /// The API's certificate and key (PEM); none: one made once and kept
    /// beside the archive.
    pub tls_cert: Option<(PathBuf, PathBuf)>,
    /// The shared token peers and mutating API calls must present.
    pub token: Option<String>,
    /// What requesters may ask.
    pub limits: Limits,
    /// What the API's connections may take.
    pub connections: ConnLimits,
    /// Serve the beacon services (TCP test port, STAMP reflector).
    pub beacon: bool,
    /// TCP test port of the beacon.
    pub beacon_port: u16,
    /// UDP port of the beacon's STAMP reflector.
    pub stamp_port: u16,
    /// Serve iperf3 clients on this port too (none: off).
    pub iperf3_port: Option<u16>,
    /// Serve QUIC perf clients on this UDP port too (none: off).
    pub quic_port: Option<u16>,
    /// Serve OWAMP on this TCP port too (none: off).
    pub owamp_port: Option<u16>,
    /// Serve TWAMP on this TCP port too (none: off).
    pub twamp_port: Option<u16>,
    /// Serve M-Lab's ndt7 speed test (and the /speedtest page's tests) on
    /// this TCP port too (none: off).
    pub ndt7_port: Option<u16>,
    /// How often a configuration URL is read again.
    pub reload_every: Duration,
    /// How much history the archive keeps.
    pub retention: Retention,
    /// Answer pScheduler leads as a throughput participant (none: off).
    pub pscheduler: Option<crate::state::pscheduler::PsOptions>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            role: Role::Agent,
            database: None,
            forward: Vec::new(),
            forward_backlog: 100_000,
            lease: Duration::from_secs(90),
            config: ConfigSource::File(PathBuf::from("/etc/goodput/mesh.toml")),
            identities: Vec::new(),
            archive: PathBuf::from("/var/lib/goodput/archive.sqlite"),
            api_listen: Vec::new(),
            plain_api_listen: Vec::new(),
            tls_cert: None,
            token: None,
            limits: Limits::default(),
            connections: ConnLimits::default(),
            beacon: true,
            beacon_port: 4444,
            stamp_port: 862,
            iperf3_port: None,
            quic_port: None,
            owamp_port: None,
            twamp_port: None,
            ndt7_port: None,
            reload_every: Duration::from_secs(300),
            retention: Retention::default(),
            pscheduler: None,
        }
    }
}
