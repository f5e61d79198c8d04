//! `goodput http` and `goodput tls`.

use clap::{Args, ValueEnum};
use goodput_core::units::{ByteSize, HumanDuration};
use std::path::PathBuf;

use super::ViewArgs;

/// The request's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// GET.
    #[value(name = "GET", alias = "get")]
    Get,
    /// HEAD: the head only, no body.
    #[value(name = "HEAD", alias = "head")]
    Head,
    /// POST, with --data as its body.
    #[value(name = "POST", alias = "post")]
    Post,
}

#[derive(Debug, Args)]
pub struct HttpArgs {
    /// The URL, http:// or https://.
    pub url: String,
    /// The request's method.
    #[arg(long, short = 'X', value_enum, default_value = "GET")]
    pub method: MethodArg,
    /// The request body (with --method POST).
    #[arg(long, short = 'd', value_name = "TEXT")]
    pub data: Option<String>,
    /// A header added to the request, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "NAME:VALUE")]
    pub header: Vec<String>,
    /// Speak HTTP/1.1 only (by default, over TLS, ALPN chooses HTTP/2
    /// where the server offers it).
    #[arg(long, conflicts_with = "http2")]
    pub http1: bool,
    /// Speak HTTP/2 only: ALPN h2 over TLS, prior knowledge in clear.
    #[arg(long)]
    pub http2: bool,
    /// The status codes that pass: LOW-HIGH or one code. A response
    /// outside fails the request's check (the `matched` figure).
    #[arg(long, default_value = "200-299", value_name = "RANGE")]
    pub expect_status: String,
    /// A substring the body must contain.
    #[arg(long, value_name = "TEXT")]
    pub expect_body: Option<String>,
    /// A regular expression the body must match (Rust regex syntax).
    #[arg(long, value_name = "RE")]
    pub expect_body_regex: Option<String>,
    /// A jq filter over the body read as JSON that must give neither
    /// false nor null, e.g. '.status == "ok"' (a bounded subset of jq:
    /// paths, comparisons, select, map, length, has …).
    #[arg(long, value_name = "FILTER")]
    pub expect_json: Option<String>,
    /// Follow up to N redirects, each a new connection timed on its own
    /// (0: the redirect is the answer).
    #[arg(long, short = 'L', default_value_t = 0, value_name = "N")]
    pub follow: u32,
    /// Read at most this much of a body; a longer one is cut there and
    /// said so.
    #[arg(long, default_value = "10MiB", value_name = "SIZE")]
    pub max_body: ByteSize,
    /// How long one request may take, redirects and body included.
    #[arg(long, short = 'W', default_value = "10s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Trust certificates that chain to the CA certificates in this PEM
    /// file instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Go on when the certificate does not verify (its facts are still
    /// read and shown).
    #[arg(long, short = 'k')]
    pub insecure: bool,
    /// Connect to ADDR for HOST instead of looking it up (curl's
    /// --resolve without the port).
    #[arg(long, value_name = "HOST:ADDR")]
    pub resolve: Option<String>,
    /// Requests to make, each on new connections.
    #[arg(long, short = 'c', default_value_t = 1, value_name = "N")]
    pub count: u64,
    /// Time between the starts of requests.
    #[arg(long, short = 'i', default_value = "1s", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Http))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}

#[derive(Debug, Args)]
pub struct TlsArgs {
    /// HOST:PORT of any TLS server (443 when no port is given).
    pub host: String,
    /// The name sent as SNI and checked against the certificate (the
    /// host when not given).
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
    /// Offer these application protocols by ALPN, most wanted first
    /// (repeatable or comma-separated, e.g. h2,http/1.1).
    #[arg(long, value_name = "PROTO", value_delimiter = ',')]
    pub alpn: Vec<String>,
    /// Trust certificates that chain to the CA certificates in this PEM
    /// file instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Do not count a chain that does not verify as a failure (exit 1);
    /// its facts are read either way.
    #[arg(long, short = 'k')]
    pub insecure: bool,
    /// Fail (exit 4) when a certificate of the chain expires within N
    /// days: the assertion `cert_days_left >= N`.
    #[arg(long, value_name = "N")]
    pub min_days: Option<u32>,
    /// How long connect and handshake may take.
    #[arg(long, short = 'W', default_value = "10s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Tls))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
