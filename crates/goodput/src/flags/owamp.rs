//! The flags of `goodput owamp` and `goodput twamp`.

use super::ViewArgs;
use clap::Args;
use goodput_core::spec::owamp::SecurityMode;
use goodput_core::units::{HumanDuration, PortRange};
use std::net::IpAddr;
use std::path::PathBuf;

/// `--mode`: a name or owping's letter.
pub fn parse_mode(s: &str) -> Result<SecurityMode, String> {
    match s.to_ascii_lowercase().as_str() {
        "open" | "o" => Ok(SecurityMode::Open),
        "authenticated" | "a" => Ok(SecurityMode::Authenticated),
        "encrypted" | "e" => Ok(SecurityMode::Encrypted),
        _ => Err(format!(
            "unknown mode {s:?}: open, authenticated or encrypted (O, A, E)"
        )),
    }
}

/// The control and test-packet flags OWAMP and TWAMP share.
#[derive(Debug, Args)]
pub struct LatencyCommon {
    /// Packets per session.
    #[arg(long, short = 'c', default_value_t = 100, value_name = "N")]
    pub count: u64,
    /// Time between packets (with --poisson, their mean), e.g. 100ms.
    #[arg(long, short = 'i', default_value = "100ms", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// DSCP of the test packets (0-63), e.g. 46 for EF (owping's -D).
    #[arg(long, short = 'D', default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: u8,
    /// How long after its send time a packet still counts as arrived; later
    /// it is lost (owping's -L), e.g. 2s.
    #[arg(long, short = 'L', default_value = "2s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Security mode: open, authenticated or encrypted (or owping's
    /// letters O, A, E). The last two need a key: --passphrase-file, and
    /// --key-id unless the file's first key is the one.
    #[arg(long, short = 'A', default_value = "open", value_name = "MODE", value_parser = parse_mode)]
    pub mode: SecurityMode,
    /// The key identity the server knows the shared secret by (owping's
    /// -u; at most 80 bytes). Default with --passphrase-file: the file's
    /// first key.
    #[arg(long, short = 'u', value_name = "NAME")]
    pub key_id: Option<String>,
    /// A passphrase file in owamp's pfs format (`identity<TAB>hex`, as
    /// pfstore writes it) holding the key identity's secret (owping's -k).
    #[arg(long, short = 'k', value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
    /// Local UDP ports for the test packets, LOW..HIGH (owping's -P,
    /// whose default is 8760..9960); default: any free port.
    #[arg(long, short = 'P', value_name = "LOW..HIGH")]
    pub port_range: Option<PortRange>,
    /// Local address to connect and send from.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
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
}

/// `goodput owamp`: an OWAMP client, owping's equivalent.
#[derive(Debug, Args)]
pub struct OwampArgs {
    /// The OWAMP server: HOST, HOST:PORT or [V6]:PORT (owampd, a
    /// perfSONAR host, a goodput agent).
    pub host: Option<String>,
    /// OWAMP-Control TCP port, when HOST has none.
    #[arg(long, short = 'p', default_value_t = 861)]
    pub port: u16,
    /// Only the session from this host to the server (owping's -t).
    #[arg(long, short = 't', conflicts_with = "from")]
    pub to: bool,
    /// Only the session from the server to this host (owping's -f).
    #[arg(long, short = 'f')]
    pub from: bool,
    /// Send times drawn from an exponential distribution whose mean is
    /// --interval (a Poisson stream on RFC 4656's schedule), not at a
    /// fixed interval.
    #[arg(long)]
    pub poisson: bool,
    /// Bytes of random padding after each test packet's header (the header
    /// is 14 bytes open, 48 authenticated or encrypted); owping's -s.
    #[arg(long, short = 's', default_value_t = 0, value_name = "BYTES")]
    pub padding: u32,
    /// A stream that runs until stopped (powstream's): sessions of
    /// --summary-every packets one after the other, each summarised as it
    /// ends; --count is then unused.
    #[arg(long)]
    pub continuous: bool,
    /// With --continuous: packets per session and summary (powstream's
    /// -N; pScheduler's latencybg uses 600 at 0.1 s).
    #[arg(long, default_value_t = 600, value_name = "N", requires = "continuous")]
    pub summary_every: u64,
    /// With --continuous: stop the stream after this long, e.g. 1h
    /// (default: until stopped with Ctrl-C).
    #[arg(long, value_name = "DURATION", requires = "continuous")]
    pub duration: Option<HumanDuration>,
    #[command(flatten)]
    pub common: LatencyCommon,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Owamp))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}

/// `goodput twamp`: a TWAMP client and session-sender, twping's
/// equivalent.
#[derive(Debug, Args)]
pub struct TwampArgs {
    /// The TWAMP server: HOST, HOST:PORT or [V6]:PORT (twampd, a
    /// perfSONAR host, a goodput agent).
    pub host: Option<String>,
    /// TWAMP-Control TCP port, when HOST has none.
    #[arg(long, short = 'p', default_value_t = 862)]
    pub port: u16,
    /// Bytes of padding after each test packet's header; default: enough
    /// for the reflector to answer at the same size (27 open, 64
    /// authenticated or encrypted), as twping pads.
    #[arg(long, short = 's', value_name = "BYTES")]
    pub padding: Option<u32>,
    #[command(flatten)]
    pub common: LatencyCommon,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Twamp))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
