//! The mesh configuration the agent runs: read from a file or a URL,
//! resolved to this host's share (the task pairs it leads), and reloaded
//! on SIGHUP and on a period for a URL. A new document that does not read
//! or validate leaves the old one running; its error is in the log and the
//! API until a good one loads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use goodput_core::mesh::{Lead, MeshConfig, PairTask};
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;

use crate::clock;
use crate::log::{log, warn};
use crate::state::Shared;

pub(crate) mod psconfig;

/// Where the configuration comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigSource {
    /// A file (TOML for a `.toml` name, else JSON).
    File(PathBuf),
    /// An `http://` URL (JSON, or TOML when the body is not JSON).
    Url(String),
}

impl ConfigSource {
    /// A file name or a URL.
    pub fn parse(text: &str) -> Self {
        if text.starts_with("http://") || text.starts_with("https://") {
            ConfigSource::Url(text.to_owned())
        } else {
            ConfigSource::File(PathBuf::from(text))
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::Url(u) => f.write_str(u),
        }
    }
}

/// A task pair this agent leads: it books the slot (and, when it is the
/// source, runs it).
#[derive(Debug, Clone)]
pub(crate) struct Led {
    /// The pair.
    pub(crate) task: PairTask,
    /// The other agent's API (none: no agent there, or it is this host).
    pub(crate) peer: Option<Peer>,
    /// This host runs the test (it is the source).
    pub(crate) runs_here: bool,
    /// The other end is a perfSONAR host whose pScheduler books the run.
    pub(crate) pscheduler: Option<PsHost>,
}

/// Another agent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Peer {
    /// Its address's name in the configuration.
    pub(crate) name: String,
    /// Its API, `http://ADDRESS:PORT`.
    pub(crate) url: String,
    /// Its IP addresses in the configuration (its address and labels):
    /// calls that claim to be from it must come from one of them. Empty
    /// when it is configured by host name only.
    pub(crate) ips: Vec<std::net::IpAddr>,
    /// Its certificate's fingerprint: its API is HTTPS, and only that
    /// certificate is accepted.
    pub(crate) pin: Option<[u8; 32]>,
}

/// A perfSONAR host's pScheduler, the other end of a led pair.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PsHost {
    /// Its address's name in the configuration.
    pub(crate) name: String,
    /// Its API's root, `https://HOST/pscheduler`.
    pub(crate) url: String,
    /// The task's participants: this host's address, then its.
    pub(crate) participants: [String; 2],
    /// The address calls to it come from (this host's, when an IP).
    pub(crate) from: Option<std::net::IpAddr>,
}

/// A configuration resolved for this host.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    /// The document.
    pub(crate) config: MeshConfig,
    /// This host's address names.
    pub(crate) mine: Vec<String>,
    /// Where those were found.
    pub(crate) identities: Vec<String>,
    /// The pairs it leads.
    pub(crate) led: Vec<Led>,
    /// Every pair of the mesh (what a peer's booking is checked against).
    pub(crate) pairs: Vec<PairTask>,
    /// When it was loaded (ms).
    pub(crate) loaded_ms: u64,
    /// What a pSConfig template's conversion did not carry over (none
    /// for a goodput mesh document).
    pub(crate) notes: Vec<String>,
}

impl Loaded {
    /// The API of the agent at an address name (none without an agent).
    pub(crate) fn peer(&self, name: &str) -> Option<Peer> {
        let a = self.config.addresses.get(name)?;
        if a.no_agent || self.mine.iter().any(|m| m == name) {
            return None;
        }
        let host = match a.address.parse::<std::net::Ipv6Addr>() {
            Ok(v6) => format!("[{v6}]"),
            Err(_) => a.address.clone(),
        };
        // A pin that does not read was refused when the document loaded.
        let pin = a.tls_sha256.as_deref().and_then(|p| crate::tls::read_pin(p).ok());
        let scheme = if pin.is_some() { "https" } else { "http" };
        Some(Peer {
            name: name.to_owned(),
            url: format!("{scheme}://{host}:{}", self.config.agent.api_port),
            ips: self.ips_of(name),
            pin,
        })
    }

    /// The pScheduler of the perfSONAR host at `dest`, when an exclusive
    /// or normal iperf3 test from `source` (this host) to it is booked
    /// there: the task's participants are both ends' addresses (of the
    /// task's `label`, when it has one).
    pub(crate) fn pscheduler_host(
        &self,
        source: &str,
        dest: &str,
        spec: &TestSpec,
        class: RunClass,
        label: Option<&str>,
    ) -> Option<PsHost> {
        let d = self.config.addresses.get(dest).filter(|a| a.pscheduler)?;
        let s = self.config.addresses.get(source)?;
        if !matches!(spec, TestSpec::Iperf3(_)) || class == RunClass::Background {
            return None;
        }
        let at = |a: &goodput_core::mesh::Address| {
            label
                .and_then(|l| a.labels.get(l))
                .unwrap_or(&a.address)
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned()
        };
        let (from, to) = (at(s), at(d));
        let host = match to.parse::<std::net::Ipv6Addr>() {
            Ok(v6) => format!("[{v6}]"),
            Err(_) => to.clone(),
        };
        Some(PsHost {
            name: dest.to_owned(),
            url: format!("https://{host}/pscheduler"),
            from: from.parse().ok(),
            participants: [from, to],
        })
    }

    /// The IP addresses an address name is configured with.
    pub(crate) fn ips_of(&self, name: &str) -> Vec<std::net::IpAddr> {
        let Some(a) = self.config.addresses.get(name) else {
            return Vec::new();
        };
        std::iter::once(&a.address)
            .chain(a.labels.values())
            .filter_map(|t| t.trim_start_matches('[').trim_end_matches(']').parse().ok())
            .collect()
    }

    /// The name of the configured address a host (name or IP address, as a
    /// spec names it) is.
    pub(crate) fn name_of_host(&self, host: &str) -> Option<String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: Option<std::net::IpAddr> = host.parse().ok();
        self.config
            .addresses
            .iter()
            .find(|(_, a)| {
                std::iter::once(&a.address).chain(a.labels.values()).any(|t| {
                    let t = t.trim_start_matches('[').trim_end_matches(']');
                    t.eq_ignore_ascii_case(host) || (ip.is_some() && t.parse().ok() == ip)
                })
            })
            .map(|(n, _)| n.clone())
    }
}

/// A configuration document's text, from a file or a URL (at most 16 MiB,
/// 30 s), and whether it is TOML.
pub async fn fetch(source: &ConfigSource) -> Result<(String, bool), String> {
    fetch_with(source, None).await
}

/// How long reading the configuration document may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// The same, presenting `token` to a pinned `https://…#SHA256` URL (a
/// fleet archive gives its document's secrets only to token holders; the
/// pin keeps the token from anyone else).
pub(crate) async fn fetch_with(source: &ConfigSource, token: Option<&str>) -> Result<(String, bool), String> {
    fetch_within(source, token, FETCH_TIMEOUT).await
}

/// The same, within `limit` (a file too: a named pipe that nobody
/// writes to would otherwise hold the reload for ever).
pub(crate) async fn fetch_within(
    source: &ConfigSource,
    token: Option<&str>,
    limit: Duration,
) -> Result<(String, bool), String> {
    match tokio::time::timeout(limit, fetch_unbounded(source, token, limit)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "cannot {} {source}: no answer within {} s",
            match source {
                ConfigSource::File(_) => "read",
                ConfigSource::Url(_) => "fetch",
            },
            limit.as_secs()
        )),
    }
}

async fn fetch_unbounded(
    source: &ConfigSource,
    token: Option<&str>,
    limit: Duration,
) -> Result<(String, bool), String> {
    match source {
        ConfigSource::File(p) => {
            let too_big = || {
                format!(
                    "{}: limit max_config_bytes: larger than {MAX_CONFIG_BYTES} bytes",
                    p.display()
                )
            };
            let file = tokio::fs::File::open(p)
                .await
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            // Never more than the limit read, whatever the file's size
            // says (it may grow while it is read).
            let mut bytes = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(
                &mut tokio::io::AsyncReadExt::take(file, MAX_CONFIG_BYTES + 1),
                &mut bytes,
            )
            .await
            .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            if bytes.len() as u64 > MAX_CONFIG_BYTES {
                return Err(too_big());
            }
            let text = String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", p.display()))?;
            let toml = p.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"));
            Ok((text, toml))
        }
        ConfigSource::Url(u) => {
            // The version last read, sent back as If-None-Match: a server
            // that tags its documents (a fleet archive) answers 304 while
            // nothing changed.
            let cached = url_cache()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(u)
                .cloned();
            // `URL#SHA256`: an https:// server whose certificate has this
            // fingerprint (a fleet archive's self-signed one). A redirect
            // is followed only to the same https origin, where the same
            // client checks the same pin; one elsewhere (plain http,
            // another host or port) would bypass the pin, and is refused.
            let (target, client) = match u.split_once('#') {
                Some((base, pin)) => {
                    let pin = crate::tls::read_pin(pin).map_err(|e| format!("{u}: {e}"))?;
                    let client = reqwest::Client::builder()
                        .use_preconfigured_tls(crate::tls::pinned_client_config(pin))
                        .redirect(reqwest::redirect::Policy::custom(same_origin_only))
                        .build()
                        .map_err(|e| format!("{u}: {e}"))?;
                    (base, client)
                }
                None => (u.as_str(), reqwest::Client::new()),
            };
            // Past `limit`, so that fetch_within's own deadline (which says
            // so in words) is the one that ends a silent server.
            let mut request = client.get(target).timeout(limit + Duration::from_secs(1));
            if let Some(t) = token.filter(|_| u.contains('#')) {
                request = request.bearer_auth(t);
            }
            if let Some((tag, _)) = &cached {
                request = request.header(reqwest::header::IF_NONE_MATCH, tag);
            }
            let response = request.send().await.map_err(|e| {
                // reqwest's message for a refused redirect is its own
                // ("error following redirect"); ours is in the source.
                let why = std::error::Error::source(&e)
                    .filter(|_| e.is_redirect())
                    .map_or_else(|| e.to_string(), |s| s.to_string());
                format!("cannot fetch {u}: {why}")
            })?;
            if response.status() == reqwest::StatusCode::NOT_MODIFIED {
                if let Some((_, text)) = cached {
                    let toml = !text.trim_start().starts_with('{');
                    return Ok((text, toml));
                }
            }
            if !response.status().is_success() {
                let status = response.status();
                // A publisher says why in its body (pSConfig Web Admin's
                // /pub/auto/HOST: "no such hostname registered: HOST").
                let why = crate::answer::body_capped(response, 4096)
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| {
                        ["message", "error"]
                            .iter()
                            .find_map(|k| v.get(*k).and_then(serde_json::Value::as_str).map(str::to_owned))
                    })
                    .map(|m| {
                        let m: String = m.chars().filter(|c| !c.is_control()).take(200).collect();
                        format!(" ({m})")
                    })
                    .unwrap_or_default();
                return Err(format!("cannot fetch {u}: HTTP {status}{why}"));
            }
            let tag = response
                .headers()
                .get(reqwest::header::ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            // A configuration is small; a bigger body is refused, not read.
            let bytes = crate::answer::body_capped(response, MAX_CONFIG_BYTES)
                .await
                .map_err(|e| match e {
                    Some(e) => format!("cannot fetch {u}: {e}"),
                    None => format!("{u}: limit max_config_bytes: larger than {MAX_CONFIG_BYTES} bytes"),
                })?;
            let text = String::from_utf8(bytes.to_vec()).map_err(|_| format!("{u}: not UTF-8 text"))?;
            let toml = !text.trim_start().starts_with('{');
            let mut cache = url_cache().lock().unwrap_or_else(|p| p.into_inner());
            match tag {
                Some(tag) => {
                    // A template's includes are cached too; one whose
                    // include URLs change on every reload must not make
                    // the cache grow without end.
                    cache.remove(u);
                    let held: usize = cache.values().map(|(_, t)| t.len()).sum();
                    if cache.len() >= MAX_CACHED_URLS || held + text.len() > MAX_CACHED_BYTES {
                        cache.clear();
                    }
                    cache.insert(u.clone(), (tag, text.clone()));
                }
                None => {
                    cache.remove(u);
                }
            }
            Ok((text, toml))
        }
    }
}

/// Most redirects a pinned configuration URL follows.
const MAX_REDIRECTS: usize = 5;

/// A pinned URL's redirect policy: only to the same scheme (https), host
/// and port as the URL asked first, at most [`MAX_REDIRECTS`] times.
fn same_origin_only(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first();
    let to = attempt.url();
    let same = first.is_some_and(|f| {
        to.scheme() == "https"
            && f.scheme() == "https"
            && to.host_str() == f.host_str()
            && to.port_or_known_default() == f.port_or_known_default()
    });
    if !same {
        let host = to.host_str().unwrap_or("");
        let origin = match to.port() {
            Some(p) => format!("{}://{host}:{p}", to.scheme()),
            None => format!("{}://{host}", to.scheme()),
        };
        let why = format!(
            "redirected to {origin}: a pinned configuration URL follows redirects only to its own \
             https origin (the pin would not be checked there)"
        );
        return attempt.error(why);
    }
    if attempt.previous().len() > MAX_REDIRECTS {
        return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
    }
    attempt.follow()
}

/// The most URLs whose last text is kept: a template and every include
/// it may have, twice over.
const MAX_CACHED_URLS: usize = 2 * (psconfig::MAX_INCLUDES + 1);

/// The most bytes of text kept for them: a template with its includes
/// is at most one document's worth, so two of them.
const MAX_CACHED_BYTES: usize = 2 * goodput_core::mesh::MAX_DOCUMENT_BYTES;

/// Each configuration URL's last ETag and text.
fn url_cache() -> &'static std::sync::Mutex<std::collections::HashMap<String, (String, String)>> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, (String, String)>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The largest configuration document read (core's limit on a document).
const MAX_CONFIG_BYTES: u64 = goodput_core::mesh::MAX_DOCUMENT_BYTES as u64;

/// Reads, validates and resolves the configuration for this host: a
/// goodput mesh document, or a pSConfig template converted (with its
/// includes) on every load, as perfSONAR's pSConfig agent does.
pub(crate) async fn load(
    source: &ConfigSource,
    identities: &[String],
    token: Option<&str>,
) -> Result<Loaded, String> {
    let (text, toml) = fetch_with(source, token).await?;
    let (config, notes) = read_config(source, text, toml).await?;
    let identities = match (identities.is_empty(), publisher_host(source)) {
        (true, Some(host)) => {
            let mut own = own_identities();
            own.push(host);
            own
        }
        _ => identities.to_vec(),
    };
    let mut loaded = resolve(config, &identities).map_err(|e| format!("{source}: {e}"))?;
    say_notes(source, &notes);
    loaded.notes = notes;
    Ok(loaded)
}

/// A configuration document's text as a mesh configuration, and what a
/// pSConfig template's conversion did not carry over. What the document
/// is, is told by its content, whatever its name: JSON that is a pSConfig
/// template is converted (its includes read from where `source` says),
/// other JSON and TOML are goodput's own document.
pub async fn read_config(
    source: &ConfigSource,
    text: String,
    toml: bool,
) -> Result<(MeshConfig, Vec<String>), String> {
    let json = text.trim_start().starts_with('{');
    if json {
        // A document that does not parse is left to the mesh reader,
        // whose error names the line and column.
        if let Ok(doc) = psconfig::parse(&text) {
            if psconfig::is_meshconfig(&doc) {
                return Err(format!(
                    "{source}: a perfSONAR 4 MeshConfig document (it has `organizations`), not a pSConfig \
                     template: ask its publisher for pSConfig (a pSConfig Web Admin URL takes ?format=psconfig)"
                ));
            }
            if psconfig::is_template(&doc) {
                let bytes = text.len();
                drop(text);
                let merged = psconfig::with_includes(source, doc, bytes).await?;
                let imported = goodput_core::psconfig::import_psconfig(
                    &merged.template,
                    goodput_core::psconfig::ImportChoices::default(),
                )
                .map_err(|e| format!("{source}: pSConfig template: {e}"))?;
                let mut notes = merged.notes;
                notes.extend(imported.notes);
                return Ok((imported.config, notes));
            }
        }
    }
    let config = MeshConfig::read(&text, toml && !json).map_err(|e| match e.field.as_str() {
        "" => format!("{source}: {}", e.message),
        f => format!("{source}: {f}: {}", e.message),
    })?;
    Ok((config, Vec::new()))
}

/// The host a pSConfig Web Admin's per-host URL (`…/pub/auto/HOST`) is
/// for: the publisher makes that template from the tests its HOST is in,
/// naming it as registered, so the agent is that host too.
fn publisher_host(source: &ConfigSource) -> Option<String> {
    let ConfigSource::Url(u) = source else {
        return None;
    };
    let path = u.split_once("://")?.1.split(['?', '#']).next()?;
    let mut parts = path.trim_end_matches('/').rsplit('/');
    let host = parts.next()?;
    (parts.next()? == "auto" && parts.next()? == "pub" && !host.is_empty()).then(|| host.to_owned())
}

/// The most notes said one by one when a template is converted.
const MAX_NOTES_SAID: usize = 50;

/// Says a template's notes in the log when they are not the ones said
/// last (a URL is read again every few minutes; the same notes each time
/// would bury the log).
fn say_notes(source: &ConfigSource, notes: &[String]) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if said.as_slice() == notes {
        return;
    }
    if !notes.is_empty() {
        log(&format!(
            "{source}: a pSConfig template, converted; {} things not carried over, or carried over differently:",
            notes.len()
        ));
        for n in notes.iter().take(MAX_NOTES_SAID) {
            log(&format!("  {n}"));
        }
        if notes.len() > MAX_NOTES_SAID {
            log(&format!("  … and {} more", notes.len() - MAX_NOTES_SAID));
        }
    }
    *said = notes.to_vec();
}

/// This host's share of a configuration.
pub(crate) fn resolve(config: MeshConfig, identities: &[String]) -> Result<Loaded, String> {
    let identities = if identities.is_empty() {
        own_identities()
    } else {
        identities.to_vec()
    };
    let mine = mine(&config, &identities);
    let mut loaded = Loaded {
        config,
        mine,
        identities,
        led: Vec::new(),
        pairs: Vec::new(),
        loaded_ms: clock::now_ms(),
        notes: Vec::new(),
    };
    let everyone: Vec<String> = loaded.config.addresses.keys().cloned().collect();
    let all = loaded
        .config
        .tasks_for(&everyone)
        .map_err(|e| format!("{}: {}", e.field, e.message))?;
    loaded.pairs = all.clone();
    for t in all {
        let source_here = loaded.mine.contains(&t.source);
        let dest_here = t.dest.as_ref().is_some_and(|d| loaded.mine.contains(d));
        let lead_here = match (t.lead, t.dest_has_agent) {
            (Lead::Destination, true) => dest_here,
            _ => source_here,
        };
        if !lead_here {
            continue;
        }
        let other = if source_here {
            t.dest.clone()
        } else {
            Some(t.source.clone())
        };
        let peer = other.and_then(|o| loaded.peer(&o));
        let label = loaded.config.tasks.get(&t.task).and_then(|x| x.label.clone());
        let pscheduler = t
            .dest
            .as_deref()
            .filter(|_| source_here)
            .and_then(|d| loaded.pscheduler_host(&t.source, d, &t.spec, t.class, label.as_deref()));
        loaded.led.push(Led {
            task: t,
            peer,
            runs_here: source_here,
            pscheduler,
        });
    }
    Ok(loaded)
}

/// The address names an agent with these identities holds (an identity
/// may be an address, a label's address or an address's name).
pub fn mine(config: &MeshConfig, identities: &[String]) -> Vec<String> {
    let mut mine = config.addresses_of(identities);
    for i in identities {
        if config.addresses.contains_key(i.as_str()) && !mine.contains(i) {
            mine.push(i.clone());
        }
    }
    mine
}

/// Something about how this agent would run that the operator should
/// know before the first run fails: said at start and after a reload (a
/// warning in the log) and by `goodput agent --check-config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concern {
    /// `--check-config` exits non-zero for it: the agent would run, but
    /// runs would fail or nothing would run (a clock is the host's, not
    /// the configuration's, and only warns).
    pub fatal: bool,
    /// One line: what is wrong, what it costs, what to do.
    pub text: String,
}

/// What is wrong with running `config` as the host holding `mine`
/// (looked for as `identities`), with a token or without, on a clock the
/// kernel says is synchronised or not.
pub fn concerns(
    config: &MeshConfig,
    mine: &[String],
    identities: &[String],
    token: bool,
    clock_synchronised: bool,
) -> Vec<Concern> {
    let mut out = Vec::new();
    if mine.is_empty() && !config.addresses.is_empty() {
        let mut looked: Vec<&str> = identities.iter().map(String::as_str).take(8).collect();
        if identities.len() > looked.len() {
            looked.push("…");
        }
        out.push(Concern {
            fatal: true,
            text: format!(
                "this host is none of the mesh's {} addresses (looked for {}): it runs no task and \
                 serves only as a beacon; give --as NAME, or add this host's address to the configuration",
                config.addresses.len(),
                looked.join(", ")
            ),
        });
    }
    if !token && !mine.is_empty() {
        let everyone: Vec<String> = config.addresses.keys().cloned().collect();
        // Pairs between this host and another agent: booked through the
        // API, which takes a booking only with the mesh's token.
        let with_agents: Vec<PairTask> = config
            .tasks_for(&everyone)
            .unwrap_or_default()
            .into_iter()
            .filter(|t| {
                let source_here = mine.contains(&t.source);
                let dest_here = t.dest.as_ref().is_some_and(|d| mine.contains(d));
                t.dest_has_agent && source_here != dest_here
            })
            .collect();
        if let Some(first) = with_agents.first() {
            let other = if mine.contains(&first.source) {
                first.dest.clone().unwrap_or_default()
            } else {
                first.source.clone()
            };
            out.push(Concern {
                fatal: true,
                text: format!(
                    "no token (--token-file): {} task pairs with another agent (e.g. {} with {other}) \
                     are booked through the agents' API, which takes bookings only with the mesh's token, \
                     so every one of them would fail; give every agent the same --token-file \
                     (`goodput agent --new-token` makes one)",
                    with_agents.len(),
                    first.task
                ),
            });
        }
    }
    for o in config.self_overlaps() {
        out.push(Concern {
            fatal: false,
            text: format!(
                "task {}: each run lasts {} but the task repeats every {}: runs would overlap \
                 themselves (each one still going when the next is due); make the repeat at least \
                 as long as a run, or the run shorter",
                o.task,
                in_words(o.run_ms),
                in_words(o.every_ms)
            ),
        });
    }
    if !clock_synchronised {
        out.push(Concern {
            fatal: false,
            text: "the system clock is not synchronised (the kernel's adjtimex says so): one-way delays \
                   are left out of results as unreliable, and runs booked with other hosts may start \
                   apart as the clocks drift; run chrony or ntpd (or systemd-timesyncd)"
                .into(),
        });
    }
    out
}

/// Milliseconds in words, every unit that is not zero (`2 min 4 s`,
/// `1 d`, `1 h 500 ms`): exact, so two lengths that differ never read
/// the same.
fn in_words(ms: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let mut left = ms;
    let mut parts = Vec::new();
    for (size, name) in UNITS {
        if left >= size {
            parts.push(format!("{} {name}", left / size));
            left %= size;
        }
    }
    match parts.is_empty() {
        true => "0 ms".into(),
        false => parts.join(" "),
    }
}

/// The settings read once, when the API starts listening: a reload that
/// changes them needs a restart to take effect.
fn listening(loaded: &Loaded) -> Vec<(&'static str, String)> {
    let mut addresses: Vec<String> = loaded
        .mine
        .iter()
        .filter_map(|m| loaded.config.addresses.get(m))
        .map(|a| a.address.clone())
        .collect();
    addresses.sort_unstable();
    let tls = loaded
        .mine
        .iter()
        .filter_map(|m| loaded.config.addresses.get(m))
        .any(|a| a.tls_sha256.is_some());
    vec![
        ("api_port", loaded.config.agent.api_port.to_string()),
        (
            "this host's API addresses",
            match addresses.is_empty() {
                true => "(any)".into(),
                false => addresses.join(", "),
            },
        ),
        ("the API's TLS", if tls { "on" } else { "off" }.into()),
    ]
}

/// What a new configuration changes that only a restart puts in force
/// (the API listens where and how the one in force at start said): one
/// line each, `SETTING OLD → NEW`. None when `--api-listen` fixes where
/// the API listens.
pub(crate) fn needs_restart(started: &Loaded, new: &Loaded, api_listen_given: bool) -> Vec<String> {
    if api_listen_given {
        return Vec::new();
    }
    listening(started)
        .into_iter()
        .zip(listening(new))
        .filter(|(a, b)| a.1 != b.1)
        .map(|((what, old), (_, new))| format!("{what} {old} → {new}"))
        .collect()
}

/// This host's interface addresses and host name.
pub fn own_identities() -> Vec<String> {
    let mut out: Vec<String> = if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip().to_string()).collect())
        .unwrap_or_default();
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        out.push(name.trim().to_owned());
    }
    out
}

/// Reloads on SIGHUP, and on a period when the source is a URL.
pub(crate) async fn reloader(shared: Arc<Shared>) {
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(h) => Some(h),
        Err(e) => {
            log(&format!(
                "cannot watch SIGHUP ({e}): the configuration reloads only on its period"
            ));
            None
        }
    };
    let period = match shared.options.config {
        ConfigSource::Url(_) => shared.options.reload_every,
        ConfigSource::File(_) => Duration::from_secs(u64::MAX / 4),
    };
    loop {
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = async {
                match &mut hup {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => log("SIGHUP: reading the configuration again"),
            _ = tokio::time::sleep(period) => {}
        }
        reload(&shared).await;
    }
}

/// Why a new document may not replace the one in force although it
/// reads: it names no address, or no task, where the one in force has
/// some. An emptied or cut-short file (a deploy that wrote nothing, an
/// editor's truncation) would otherwise stop every measurement and drop
/// the forwarding queues without an error; to stop every task on
/// purpose, mark them `disabled = true`.
pub(crate) fn emptied(old: &MeshConfig, new: &MeshConfig) -> Option<String> {
    let what = if new.addresses.is_empty() && !old.addresses.is_empty() {
        format!("no address (the one in force names {})", old.addresses.len())
    } else if new.tasks.is_empty() && !old.tasks.is_empty() {
        format!("no task (the one in force has {})", old.tasks.len())
    } else {
        return None;
    };
    Some(format!(
        "the new document names {what}: an empty or cut-short document is refused \
         (to stop every task, mark them disabled = true)"
    ))
}

/// Reads the configuration again; on an error the old one stays.
pub(crate) async fn reload(shared: &Shared) {
    let loaded = load(
        &shared.options.config,
        &shared.options.identities,
        shared.options.token.as_deref(),
    )
    .await
    .and_then(|loaded| match emptied(&shared.loaded().config, &loaded.config) {
        Some(why) => Err(format!("{}: {why}", shared.options.config)),
        None => Ok(loaded),
    });
    match loaded {
        Ok(loaded) => {
            let n = loaded.led.len();
            let restart = needs_restart(
                &shared.started_with,
                &loaded,
                !shared.options.api_listen.is_empty(),
            );
            // Only what the reload changed: a configuration URL is read
            // every few minutes, and the start's warnings stand.
            let before = shared.concerns(&shared.loaded());
            let worries: Vec<Concern> = shared
                .concerns(&loaded)
                .into_iter()
                .filter(|c| !before.contains(c))
                .collect();
            shared.install(loaded);
            log(&format!("configuration loaded: {n} task pairs led here"));
            for c in worries {
                warn(&c.text);
            }
            for r in restart {
                warn(&format!("needs a restart to take effect: {r}"));
            }
        }
        Err(e) => {
            log(&format!("configuration not loaded, the previous one stays: {e}"));
            shared.config_failed(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[addresses.a]
address = "10.0.0.1"
[groups.solo]
type = "list"
addresses = ["a"]
[tests.t]
kind = "stamp"
host = "{{source}}"
[schedules.s]
repeat = "1m"
[tasks.t]
group = "solo"
test = "t"
schedule = "s"
"#;

    const PAIR: &str = r#"
[addresses.a]
address = "10.0.0.1"
[addresses.b]
address = "10.0.0.2"
[addresses.r]
address = "10.0.0.254"
no_agent = true
[groups.ab]
type = "mesh"
addresses = ["a", "b"]
[groups.to-r]
type = "disjoint"
a = ["a"]
b = ["r"]
unidirectional = true
[tests.t]
kind = "stamp"
host = "{{dest}}"
[schedules.s]
repeat = "1m"
[tasks.ab]
group = "ab"
test = "t"
schedule = "s"
[tasks.r]
group = "to-r"
test = "t"
schedule = "s"
"#;

    #[test]
    fn only_pairs_between_two_agents_need_the_token() {
        let config = MeshConfig::read(PAIR, true).unwrap();
        let own = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // a: a→b and b→a are booked through the API; a→r is not.
        let c = concerns(&config, &own(&["a"]), &own(&["a"]), false, true);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(c[0].fatal);
        assert!(c[0]
            .text
            .starts_with("no token (--token-file): 2 task pairs with another agent (e.g. ab with b)"));
        assert!(concerns(&config, &own(&["a"]), &own(&["a"]), true, true).is_empty());
        // The router runs no agent; a host holding both ends books nothing.
        assert!(concerns(&config, &own(&["r"]), &own(&["r"]), false, true).is_empty());
        assert!(concerns(&config, &own(&["a", "b"]), &own(&["a", "b"]), false, true).is_empty());
        // No address: fatal, naming what was looked for; the clock warns.
        let c = concerns(&config, &[], &own(&["192.0.2.7", "vm"]), true, false);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(
            c[0].fatal
                && c[0]
                    .text
                    .contains("none of the mesh's 3 addresses (looked for 192.0.2.7, vm)")
        );
        assert!(!c[1].fatal && c[1].text.starts_with("the system clock is not synchronised"));
    }

    #[test]
    fn a_new_api_port_or_address_needs_a_restart() {
        let old = resolve(MeshConfig::read(PAIR, true).unwrap(), &["a".into()]).unwrap();
        let moved = PAIR.replace("10.0.0.1", "10.0.0.9");
        let new = resolve(
            MeshConfig::read(&format!("[agent]\napi_port = 9090\n{moved}"), true).unwrap(),
            &["a".into()],
        )
        .unwrap();
        assert_eq!(
            needs_restart(&old, &new, false),
            [
                "api_port 8780 → 9090",
                "this host's API addresses 10.0.0.1 → 10.0.0.9"
            ]
        );
        assert!(needs_restart(&old, &new, true).is_empty());
        assert!(needs_restart(&old, &old, false).is_empty());
    }

    #[test]
    fn a_publishers_per_host_url_names_this_host() {
        let host = |u: &str| publisher_host(&ConfigSource::parse(u));
        assert_eq!(
            host("https://pwa.example.net/pub/auto/ps1.example.net").as_deref(),
            Some("ps1.example.net")
        );
        assert_eq!(
            host("http://192.0.2.1:8080/pwa/pub/auto/ps1/?format=psconfig").as_deref(),
            Some("ps1")
        );
        assert_eq!(host("https://pwa.example.net/pub/config/mesh"), None);
        assert_eq!(host("https://pwa.example.net/auto/ps1"), None);
        assert_eq!(host("/etc/goodput/pub/auto/ps1"), None);
    }

    #[test]
    fn the_etag_cache_stays_bounded_whatever_urls_it_is_given() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            // Every answer tagged, 1 MiB of JSON.
            let body = format!("{{\"x\": \"{}\"}}", "a".repeat(1 << 20));
            tokio::spawn(async move {
                loop {
                    let Ok((mut tcp, _)) = listener.accept().await else {
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    let _ = tcp.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nETag: \"v1\"\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = tcp.write_all(head.as_bytes()).await;
                    let _ = tcp.write_all(body.as_bytes()).await;
                }
            });
            // 100 URLs, each changing: never more than the bounds held.
            for i in 0..100 {
                let url = ConfigSource::Url(format!("http://127.0.0.1:{port}/inc.json?v={i}"));
                fetch_within(&url, None, Duration::from_secs(10)).await.unwrap();
                let cache = url_cache().lock().unwrap();
                let held: usize = cache.values().map(|(_, t)| t.len()).sum();
                assert!(cache.len() <= MAX_CACHED_URLS, "{} URLs", cache.len());
                assert!(held <= MAX_CACHED_BYTES, "{held} bytes");
                assert!(!cache.is_empty());
            }
        });
    }

    #[test]
    fn durations_in_words_are_exact() {
        assert_eq!(in_words(122_000), "2 min 2 s");
        assert_eq!(in_words(60_000), "1 min");
        assert_eq!(in_words(3_600_500), "1 h 500 ms");
        assert_eq!(in_words(86_400_000), "1 d");
        assert_eq!(in_words(0), "0 ms");
    }

    #[test]
    fn a_task_whose_runs_overlap_themselves_is_a_warning_with_both_lengths() {
        let long = ONE.replace(
            "kind = \"stamp\"",
            "kind = \"stamp\"\ncount = 600\ninterval = \"200ms\"",
        );
        let config = MeshConfig::read(&long, true).unwrap();
        let own = vec!["a".to_string()];
        let c = concerns(&config, &own, &own, true, true);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(!c[0].fatal);
        assert!(
            c[0].text.starts_with(
                "task t: each run lasts 2 min 2 s but the task repeats every 1 min: runs would overlap themselves"
            ),
            "{}",
            c[0].text
        );
        assert!(concerns(&MeshConfig::read(ONE, true).unwrap(), &own, &own, true, true).is_empty());
    }

    #[test]
    fn an_emptied_document_may_not_replace_one_with_tasks() {
        let old = MeshConfig::read(ONE, true).unwrap();
        let empty = MeshConfig::read("", true).unwrap();
        assert_eq!(
            emptied(&old, &empty).unwrap(),
            "the new document names no address (the one in force names 1): an empty or cut-short \
             document is refused (to stop every task, mark them disabled = true)"
        );
        let cut = MeshConfig::read(&ONE[..ONE.find("[tasks.t]").unwrap()], true).unwrap();
        assert!(emptied(&old, &cut)
            .unwrap()
            .contains("names no task (the one in force has 1)"));
        // Tasks disabled on purpose are still tasks; and a first empty
        // document may follow an empty one.
        let disabled = MeshConfig::read(&format!("{ONE}disabled = true\n"), true).unwrap();
        assert_eq!(emptied(&old, &disabled), None);
        assert_eq!(emptied(&empty, &empty), None);
        assert_eq!(emptied(&old, &old), None);
    }
}
