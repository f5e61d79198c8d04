//! The flags of `goodput iperf3`.

use super::ViewArgs;
use clap::Args;
use goodput_core::units::HumanDuration;
use std::net::IpAddr;
use std::path::PathBuf;

/// A size as iperf3 reads it: K, M, G, T multiply by 1024 (KiB … also
/// accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iperf3Size(pub u64);

impl std::str::FromStr for Iperf3Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        let mult: u64 = match suffix.trim() {
            "" => 1,
            "k" | "K" | "KiB" => 1 << 10,
            "m" | "M" | "MiB" => 1 << 20,
            "g" | "G" | "GiB" => 1 << 30,
            "t" | "T" | "TiB" => 1 << 40,
            _ => {
                return Err(format!(
                    "'{s}': expected a number with an optional K, M, G or T (×1024)"
                ))
            }
        };
        let v: f64 = num.parse().map_err(|_| format!("'{s}': not a number"))?;
        let bytes = v * mult as f64;
        if !(0.0..1.8e19).contains(&bytes) {
            return Err(format!("'{s}': out of range"));
        }
        Ok(Iperf3Size(bytes.round() as u64))
    }
}

/// A rate in bits/s as iperf3 reads it: k, m, g, t multiply by 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iperf3Rate(pub u64);

impl std::str::FromStr for Iperf3Rate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.contains('/') {
            return Err(format!("'{s}': burst counts (RATE/N) are not supported"));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        let mult: f64 = match suffix.trim() {
            "" => 1.0,
            "k" | "K" => 1e3,
            "m" | "M" => 1e6,
            "g" | "G" => 1e9,
            "t" | "T" => 1e12,
            _ => {
                return Err(format!(
                    "'{s}': expected bits/s with an optional k, m, g or t (×1000)"
                ))
            }
        };
        let v: f64 = num.parse().map_err(|_| format!("'{s}': not a number"))?;
        let bits = v * mult;
        if !(0.0..1.8e19).contains(&bits) {
            return Err(format!("'{s}': out of range"));
        }
        Ok(Iperf3Rate(bits.round() as u64))
    }
}

/// `goodput iperf3`: iperf3's own option letters.
#[derive(Debug, Args)]
pub struct Iperf3Args {
    /// iperf3 server host name or address (default: an embedded goodput
    /// iperf3 server on loopback).
    pub host: Option<String>,
    /// Server port.
    #[arg(long, short = 'p', default_value_t = 5201)]
    pub port: u16,
    /// Test length in seconds (ignored with -n or -k).
    #[arg(long, short = 't', default_value_t = 10, value_name = "SECONDS")]
    pub time: u32,
    /// End after this many bytes (sent, or received with -R).
    #[arg(
        long = "bytes",
        short = 'n',
        value_name = "SIZE",
        conflicts_with = "blockcount"
    )]
    pub bytes: Option<Iperf3Size>,
    /// End after this many blocks (of -l bytes).
    #[arg(long, short = 'k', value_name = "N")]
    pub blockcount: Option<u64>,
    /// Parallel streams per direction (1-128).
    #[arg(long, short = 'P', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// Reverse: the server sends.
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once (-P streams each way).
    #[arg(long)]
    pub bidir: bool,
    /// UDP instead of TCP.
    #[arg(long, short = 'u')]
    pub udp: bool,
    /// Target rate per stream in bits/s (UDP default 1M = 1048576; TCP
    /// default unlimited).
    #[arg(long, short = 'b', value_name = "RATE")]
    pub bitrate: Option<Iperf3Rate>,
    /// Block (TCP write) or datagram (UDP) size (TCP default 128K; UDP
    /// default 1460).
    #[arg(long, short = 'l', value_name = "SIZE")]
    pub length: Option<Iperf3Size>,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends.
    #[arg(long, short = 'w', value_name = "SIZE")]
    pub window: Option<Iperf3Size>,
    /// TCP congestion control algorithm on both ends.
    #[arg(long, short = 'C', value_name = "ALGO")]
    pub congestion: Option<String>,
    /// TCP maximum segment size, bytes.
    #[arg(long = "set-mss", short = 'M', value_name = "BYTES")]
    pub mss: Option<u32>,
    /// TCP_NODELAY on the data connections.
    #[arg(long = "no-delay", short = 'N')]
    pub no_delay: bool,
    /// Seconds to leave out of the figures at the start.
    #[arg(long, short = 'O', default_value_t = 0, value_name = "SECONDS")]
    pub omit: u32,
    /// IP type of service byte (0-255; DSCP × 4).
    #[arg(long, short = 'S', default_value_t = 0, value_name = "TOS")]
    pub tos: u8,
    /// Local port of the first data stream (the others use the next ports).
    #[arg(long, value_name = "PORT")]
    pub cport: Option<u16>,
    /// Local address to bind.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Ask the server for its own report and show it.
    #[arg(long)]
    pub get_server_output: bool,
    /// 64-bit UDP sequence numbers.
    #[arg(long)]
    pub udp_counters_64bit: bool,
    /// Send the digits 0-9 repeated instead of random bytes.
    #[arg(long)]
    pub repeating_payload: bool,
    /// Title, echoed into both ends' JSON.
    #[arg(long, short = 'T')]
    pub title: Option<String>,
    /// Extra data string, echoed into both ends' JSON.
    #[arg(long)]
    pub extra_data: Option<String>,
    /// Status interval.
    #[arg(long, short = 'i', default_value = "1s", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// How long a connect or a server answer may take.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Also write the result in iperf3's -J JSON shape to FILE ("-" = stdout).
    #[arg(long, value_name = "FILE")]
    pub iperf3_json: Option<PathBuf>,
    #[command(flatten)]
    pub views: ViewArgs,
}
