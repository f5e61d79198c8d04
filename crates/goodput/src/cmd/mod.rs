//! What every command shares: exit statuses, the runtime, signals, the
//! embedded loopback server, name resolution and the spec helpers.

pub(crate) mod echo;
pub(crate) mod iperf3;
pub(crate) mod quic;
pub(crate) mod run;
pub(crate) mod server;
pub(crate) mod server_limits;
pub(crate) mod stamp;
pub(crate) mod tcp;
pub(crate) mod ttcp;
pub(crate) mod udp;
pub(crate) mod views;

use crate::flags::{OutputArgs, SocketArgs};
use anyhow::{anyhow, Context};
use goodput_core::result::{EndReason, TestResult};
use goodput_core::spec::{SocketSpec, SpecError, TestSpec};
use goodput_core::units::format_size;
use goodput_engine::socket::{raise_open_file_limit, SocketOptions};
use goodput_engine::CancellationToken;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Exit status: every connection succeeded.
pub(crate) const EXIT_OK: u8 = 0;

/// Exit status: at least one connection failed (network or data error).
pub(crate) const EXIT_FAILED: u8 = 1;

/// Exit status: invalid flags or values (clap uses it too).
pub(crate) const EXIT_USAGE: u8 = 2;

/// Exit status: the run could not start or could not write its outputs.
pub(crate) const EXIT_FATAL: u8 = 3;

/// Exit status: interrupted by SIGINT/SIGTERM (after the summary and files).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// Why the program stops early.
pub(crate) enum Stop {
    Usage(String),
    Fatal(anyhow::Error),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Self {
        Stop::Fatal(e)
    }
}

pub(crate) fn usage(msg: impl Into<String>) -> Stop {
    Stop::Usage(msg.into())
}

/// A client's exit status: failed (even if interrupted too), interrupted,
/// or fine.
pub(crate) fn exit_status(result: &TestResult, failed: bool) -> u8 {
    exit_code(result.end == EndReason::Interrupted, failed)
}

/// A failure wins over an interruption: the README's 130 means "stopped,
/// nothing failed".
pub(crate) fn exit_code(interrupted: bool, failed: bool) -> u8 {
    match (interrupted, failed) {
        (_, true) => EXIT_FAILED,
        (true, false) => EXIT_INTERRUPTED,
        (false, false) => EXIT_OK,
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Stop> {
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
pub(crate) fn on_worker<F>(rt: &tokio::runtime::Runtime, fut: F) -> Result<u8, Stop>
where
    F: std::future::Future<Output = Result<u8, Stop>> + Send + 'static,
{
    rt.block_on(rt.spawn(fut))
        .unwrap_or_else(|e| Err(Stop::Fatal(anyhow::anyhow!("the run stopped abnormally: {e}"))))
}

/// Cancels `cancel` on the first SIGINT or SIGTERM; a second one exits at once.
pub(crate) fn watch_signals(cancel: CancellationToken) {
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
pub(crate) struct Embedded {
    pub(crate) cancel: CancellationToken,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl Embedded {
    /// Nothing running yet; stops with the run (`cancel`) or after it.
    pub(crate) fn new(run: &CancellationToken) -> Self {
        Self {
            cancel: run.child_token(),
            task: None,
        }
    }

    /// Runs `serve` (given the server's cancellation token) on the runtime.
    pub(crate) fn start<F>(&mut self, serve: impl FnOnce(CancellationToken) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.task = Some(tokio::spawn(serve(self.cancel.clone())));
    }

    /// Stops the server and waits for it.
    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        if let Some(t) = self.task {
            let _ = t.await;
        }
    }
}

/// The most sockets the open-file limit leaves room for (after 64 for
/// everything else), each connection taking `per_connection`; `None` when
/// the limit cannot be read.
pub(crate) fn socket_room(per_connection: u64) -> Option<(u64, u64)> {
    raise_open_file_limit()
        .ok()
        .map(|limit| (limit.saturating_sub(64) / per_connection.max(1), limit))
}

/// Fails a run whose `flag` asks for more sockets than the open-file
/// limit allows.
pub(crate) fn check_socket_room(flag: &str, wanted: u64) -> Result<(), Stop> {
    match socket_room(1) {
        Some((room, limit)) if wanted > room => Err(usage(format!(
            "{flag} {wanted} needs a socket each; the open-file limit (RLIMIT_NOFILE) is {limit}"
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn socket_options(s: &SocketArgs) -> Result<SocketOptions, Stop> {
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

pub(crate) fn check_output(o: &OutputArgs) -> Result<(), Stop> {
    goodput_core::spec::tcp::check_run(o.status_interval, o.idle_timeout, o.time_limit)
        .map_err(|e| flag_error(&e))
}

/// The addresses of `host` (a name or an address, either with `:PORT`,
/// `[v6]:PORT`, which overrides `port`), of the family asked for.
pub(crate) async fn resolve(host: &str, port: u16, v4: bool, v6: bool) -> Result<Vec<SocketAddr>, Stop> {
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

/// A validated spec's socket options (sizes were checked to fit 32 bits).
pub(crate) fn socket_options_of(s: &SocketSpec) -> SocketOptions {
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
/// (`` `rate_period` ``) is its flag too. An error of several fields
/// (`bitrate/frame_rate`) names their flags, then a colon.
pub(crate) fn flag_error(e: &SpecError) -> Stop {
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
    if field.contains('/') {
        let flags: Vec<String> = field.split('/').map(flag).collect();
        return usage(format!("{}: {message}", flags.join("/")));
    }
    usage(format!("{} {message}", flag(field)))
}

/// Prints a spec as the JSON document `goodput run` reads.
pub(crate) fn print_spec(spec: &TestSpec) -> Result<(), Stop> {
    let text = serde_json::to_string_pretty(spec).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    goodput_report::console_line(&text);
    Ok(())
}

pub(crate) fn range_text(lo: u64, hi: u64) -> String {
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

/// The loopback address of the chosen family, for embedded peers.
pub(crate) fn loopback(v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    }
}

/// `HOST:PORT`, `[v6]:PORT`, or a bare host with `default_port`.
pub(crate) fn split_target(t: &str, default_port: u16) -> Result<(String, u16), Stop> {
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
