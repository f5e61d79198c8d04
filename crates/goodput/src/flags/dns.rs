use std::path::PathBuf;

use clap::{Args, ValueEnum};
use goodput_core::units::HumanDuration;

use super::ViewArgs;

/// How `goodput dns`'s queries travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DnsTransportArg {
    /// UDP; a truncated reply (TC) is asked again over TCP.
    Udp,
    /// TCP, a connection per query.
    Tcp,
    /// DNS over TLS (RFC 7858), port 853 unless --server names one.
    Tls,
}

/// `goodput dns`: queries to a DNS server, timed and checked.
#[derive(Debug, Args)]
pub struct DnsArgs {
    /// The name to ask about (asked fully qualified: no search list).
    pub name: String,
    /// The DNS server: ADDR, ADDR:PORT, [V6]:PORT or a name. Without it,
    /// the first nameserver of /etc/resolv.conf.
    #[arg(long, short = 's', value_name = "ADDR[:PORT]")]
    pub server: Option<String>,
    /// The record type: A, AAAA, CAA, CNAME, DNSKEY, DS, HTTPS, MX, NAPTR,
    /// NS, PTR, SOA, SRV, SSHFP, SVCB or TXT.
    #[arg(
        long,
        short = 't',
        visible_alias = "type",
        default_value = "A",
        value_name = "TYPE"
    )]
    pub record: String,
    /// How queries travel.
    #[arg(long, value_enum, default_value = "udp")]
    pub transport: DnsTransportArg,
    /// With --transport tls: the name the server's certificate must
    /// carry (default: --server's name, or its address).
    #[arg(long, value_name = "NAME")]
    pub tls_name: Option<String>,
    /// With --transport tls: a PEM file of the certificate authorities
    /// to trust (default: the system's).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// A value every answer must hold among its records of the asked
    /// type, as dig +short writes it (192.0.2.1, "10 mail.example.org.");
    /// repeatable. An answer that does not makes the exit status 4.
    #[arg(long, value_name = "VALUE")]
    pub expect: Vec<String>,
    /// A regular expression at least one record of every answer must
    /// match; an answer that has none makes the exit status 4.
    #[arg(long, value_name = "REGEX")]
    pub expect_pattern: Option<String>,
    /// Do not ask the server to recurse (clear the RD bit), as for an
    /// authoritative server.
    #[arg(long)]
    pub no_recursion: bool,
    /// Queries to send.
    #[arg(long, short = 'c', default_value_t = 3, value_name = "N")]
    pub count: u64,
    /// Time between queries' starts.
    #[arg(long, short = 'i', default_value = "200ms", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// How long one try waits for its reply (TCP and TLS: with the
    /// connection's set-up).
    #[arg(long, short = 'W', default_value = "2s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Tries past the first when a try has no reply in time.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub retries: u32,
    /// Use IPv4 only (when --server is a name).
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only (when --server is a name).
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
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Dns))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
