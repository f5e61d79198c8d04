//! A `ttcp` spec's run: the target resolved (transmitting) or the address
//! to listen on (receiving), and the blocking transfer on a thread of the
//! blocking pool, with ttcp's own progress lines for the caller.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use goodput_core::result::TestResult;
use goodput_core::spec::{Family, TtcpSpec};
use tokio_util::sync::CancellationToken;

use super::{error_chain, resolve, Failure};
use crate::ttcp::{run_ttcp, DataStreams, TtcpRole as Role, TtcpSpec as EngineSpec};

/// ttcp's own progress lines (`ttcp-t: buflen=…`, `ttcp-t: socket`, …),
/// for the caller to show as classic ttcp does (the command line writes
/// them to standard error).
pub type TtcpLines = Box<dyn FnMut(String) + Send>;

/// Runs a validated ttcp spec. `data` is what a transfer without
/// `sinkmode` reads or writes (none: nothing is read, what arrives is
/// dropped); `lines` gets ttcp's progress lines.
pub(super) async fn run(
    spec: &TtcpSpec,
    data: Option<DataStreams>,
    lines: Option<TtcpLines>,
    cancel: CancellationToken,
) -> Result<TestResult, Failure> {
    let transmit = spec.transmits();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let role = match (&spec.host, transmit) {
        (Some(h), true) => Role::Transmit(resolve(h, spec.port, v4, v6).await?[0]),
        _ => {
            let ip = spec.bind.unwrap_or(if v4 {
                Ipv4Addr::UNSPECIFIED.into()
            } else {
                Ipv6Addr::UNSPECIFIED.into()
            });
            Role::Receive(SocketAddr::new(ip, spec.port))
        }
    };
    let sockbuf = spec.sockbuf_bytes();
    let engine = EngineSpec {
        role,
        udp: spec.udp,
        buflen: spec.buflen,
        nbuf: spec.nbuf,
        nodelay: spec.nodelay,
        sockbuf,
        sinkmode: spec.sinkmode,
        udp_idle: spec.udp_idle.0,
        connect_timeout: Duration::from_secs(10),
    };
    let mut lines: TtcpLines = lines.unwrap_or_else(|| Box::new(|_| {}));
    lines(format!(
        "buflen={}, nbuf={}, port={}{}  {}{}",
        engine.buflen,
        engine.nbuf,
        spec.port,
        sockbuf.map_or(String::new(), |b| format!(", sockbufsize={b}")),
        if spec.udp { "udp" } else { "tcp" },
        spec.host.as_ref().map_or(String::new(), |h| format!("  -> {h}"))
    ));
    let data = data.unwrap_or_else(DataStreams::none);
    tokio::task::spawn_blocking(move || run_ttcp(&engine, data, &mut *lines, &cancel))
        .await
        .map_err(|e| Failure::setup(format!("the transfer thread failed: {e}")))?
        .map_err(|e| Failure::setup(error_chain(&e)))
}
