//! goodput's measurement agent: one daemon per host that serves every
//! goodput service as the beacon other hosts test against, runs its share
//! of a mesh's tests on schedule (booking each exclusive run's slot with
//! the agent at the other end), keeps every run in its archive, and
//! answers an HTTP API.
//!
//! The crate has two layers above a few small leaf modules, and the
//! arrows point one way: `http` calls into `state`, `state` never names
//! `http`, and the leaves name neither (`tests/layers.rs` checks it).
//!
//! - `state`: what the agent does and holds. `Shared` is the hub (the
//!   configuration in force, the calendar, runs under way, quotas, the
//!   latest figures); beside it each subsystem with its own state:
//!   `config` (the mesh document from a file or a URL, reloaded),
//!   `booking` (the leader's, the follower's and the restart's sides of
//!   putting a run on the calendars), `exec` (runs the booked runs through
//!   the engine's one run entry, and the beacon), `minutes` (background
//!   STAMP streams as per-minute summaries), `forward` (store-and-forward
//!   to the fleet's archives), `alerts` (the soft-failure rules, alerts
//!   stored and delivered), `fleet` (registering with the archives),
//!   `peer` (calls to other agents), `options`;
//! - `http`: the API's server (`router`: listeners, admission, routes),
//!   `auth` (the token, the allow list, who a caller is), the JSON
//!   handlers one file per resource, `pages` (the dashboard), `metrics`
//!   (OpenMetrics), `openapi`; views of the state, which is also how
//!   agents talk to each other;
//! - leaves: `clock`, `limits` (what a requester may ask, each refusal
//!   naming its limit), `log`, `secrets` (redaction), `tls`
//!   (certificates and pins), `answer` (reading a bounded answer).
#![warn(missing_docs, unreachable_pub)]

mod answer;
mod clock;
mod http;
mod limits;
mod log;
mod secrets;
mod state;
mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use goodput_archive::Archive;
use tokio_util::sync::CancellationToken;

use crate::log::{log, redact, warn};

pub use answer::json_capped;
pub use http::openapi::document as openapi_document;
pub use limits::{ConnLimits, Limits, Window};
pub use state::config::psconfig::convert as convert_psconfig;
pub use state::config::{
    concerns, fetch as fetch_document, mine, own_identities, read_config, Concern, ConfigSource,
};
pub use state::forward::ForwardTarget;
pub use state::options::{AgentOptions, Role};
pub use state::pscheduler::PsOptions;
pub use tls::fingerprint;

/// The SHA-256 fingerprint of the certificate the agent serves its API
/// with (made and kept beside the archive on first use, unless given):
/// what the mesh configuration's `tls_sha256` for this host must say.
pub fn certificate_fingerprint(options: &AgentOptions, names: &[String]) -> Result<String, String> {
    let given = options.tls_cert.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    let (chain, _) = tls::identity(given, &options.archive, names)?;
    Ok(tls::fingerprint(chain[0].as_ref()))
}

/// Whether the kernel says the system clock is synchronised (adjtimex):
/// one-way delays and slots booked between hosts need it.
pub fn clock_synchronised() -> bool {
    clock::state().synchronised
}

/// Holds `ARCHIVE.lock` for the agent's life: one agent per archive.
fn lock(archive: &std::path::Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let mut path = archive.as_os_str().to_owned();
    path.push(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", std::path::Path::new(&path).display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "{}: another agent is using this archive",
            archive.display()
        ));
    }
    Ok(f)
}

/// A TLS client configuration that accepts only the certificate with this
/// SHA-256 fingerprint (64 hex digits, colons allowed), for a client of
/// an agent whose API is HTTPS (`reqwest::ClientBuilder::use_preconfigured_tls`).
pub fn pinned_tls(pin: &str) -> Result<rustls::ClientConfig, String> {
    Ok(tls::pinned_client_config(tls::read_pin(pin)?))
}

/// Runs the agent until `cancel`: loads the configuration (an invalid one
/// at start is an error), opens the archive, accounts for the runs missed
/// while it was down, starts the beacon, the API, the planner and the
/// executor, and on cancel stops them, marking runs cut short.
pub async fn run(options: AgentOptions, cancel: CancellationToken) -> Result<(), String> {
    let loaded = state::config::load(&options.config, &options.identities, options.token.as_deref()).await?;
    if let Some(dir) = options.archive.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let archive = match &options.database {
        // Several archive processes may share one PostgreSQL: nothing of
        // theirs is kept outside it, so no lock.
        Some(db) if !db.starts_with("sqlite://") => {
            if options.role == Role::Agent {
                return Err(
                    "--database postgres://… is for --role archive: an agent keeps its own runs in --archive \
                     (SQLite) and forwards them with --forward-to"
                        .into(),
                );
            }
            (
                None,
                Archive::connect(db)
                    .await
                    .map_err(|e| format!("{}: {e}", redact(db)))?,
            )
        }
        db => {
            let path = db
                .as_deref()
                .and_then(|d| d.strip_prefix("sqlite://"))
                .map_or_else(|| options.archive.clone(), PathBuf::from);
            let lock = lock(&path)?;
            (
                Some(lock),
                Archive::open(&path)
                    .await
                    .map_err(|e| format!("{}: {e}", path.display()))?,
            )
        }
    };
    let (_lock, archive) = archive;
    let role = options.role;
    let shared = Arc::new(state::Shared::new(options, archive, loaded, cancel.clone()));
    // Listening (and checking the certificate) comes before recovery
    // touches the archive's runs.
    let gate = http::listen::Gate::new(shared.options.connections.clone());
    let listeners = http::bind(&shared, &gate).await?;
    let pscheduler = http::pscheduler::bind(&shared)?;
    let mut tasks = tokio::task::JoinSet::new();
    if role == Role::Agent {
        shared.recover().await?;
        if shared.options.beacon {
            tasks.spawn(state::exec::beacon(shared.clone()));
        }
        tasks.spawn(state::booking::planner(shared.clone()));
        tasks.spawn(state::exec::executor(shared.clone()));
        tasks.spawn(state::forward::supervisor(shared.clone()));
        tasks.spawn(state::fleet::registrar(shared.clone()));
    }
    for l in listeners {
        tasks.spawn(http::serve(shared.clone(), l, gate.clone()));
    }
    for (l, app, gate) in pscheduler {
        tasks.spawn(http::serve_app(app, l, gate, shared.cancel.clone()));
    }
    tasks.spawn(state::config::reloader(shared.clone()));
    tasks.spawn(state::housekeeping(shared.clone()));
    tasks.spawn(state::alerts::evaluator(shared.clone()));
    tasks.spawn(state::alerts::deliverer(shared.clone()));
    match role {
        Role::Agent => log(&format!(
            "started: {} ({} task pairs led here), archive {}{}",
            shared.identity_line(),
            shared.led_count(),
            shared.options.archive.display(),
            match shared.forward_urls() {
                urls if urls.is_empty() => String::new(),
                urls => format!(", forwarding to {}", urls.join(", ")),
            }
        )),
        Role::Archive => log(&format!(
            "started as a fleet archive on {} ({})",
            shared.archive.engine(),
            shared
                .options
                .database
                .as_deref()
                .map_or_else(|| shared.options.archive.display().to_string(), redact)
        )),
    }
    // Said once at start, where the operator looks first (and after each
    // reload): a run that would fail anyway is better named now.
    for c in shared.concerns(&shared.loaded()) {
        warn(&c.text);
    }
    cancel.cancelled().await;
    // Give every part a moment to store what it was doing.
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    shared.shutdown().await;
    log("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_url_is_logged_without_its_password() {
        for (url, shown) in [
            (
                "postgres://goodput:s3cret@db:5432/fleet",
                "postgres://goodput:…@db:5432/fleet",
            ),
            ("postgres://goodput@db/fleet", "postgres://goodput@db/fleet"),
            ("postgres://db/fleet", "postgres://db/fleet"),
            (
                "postgres://u:p@ss@db/fleet?sslmode=verify-full&password=x&sslrootcert=/etc/ca.pem",
                "postgres://u:…@db/fleet?sslmode=verify-full&password=…&sslrootcert=/etc/ca.pem",
            ),
            ("/var/lib/goodput/archive.db", "/var/lib/goodput/archive.db"),
            ("postgres://u:pa?ss@db/x", "postgres://u:…@db/x"),
            (
                "postgres://u:p/w@db/x?sslmode=require",
                "postgres://u:…@db/x?sslmode=require",
            ),
        ] {
            assert_eq!(crate::log::redact(url), shown);
        }
    }
}
