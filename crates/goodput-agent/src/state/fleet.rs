//! A fleet's inventory, the agent's side: each agent registers with every
//! archive it forwards to (version, addresses, services, clock,
//! configuration) and renews the lease before it runs out; the archive's
//! grid shows a lapsed agent's measurements as "agent down" rather than
//! "no data" (`lapsed`). The archive's handlers are `crate::http::fleet`.
use std::sync::Arc;
use std::time::Duration;

use goodput_core::time::ms_rfc3339;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::log::log;
use crate::state::Shared;

/// What an agent says of itself when it registers.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Registration {
    /// goodput's version.
    version: String,
    /// Its mesh addresses.
    addresses: Vec<String>,
    /// The services it offers (`tcp:4444`, `stamp:862`, …).
    services: Vec<String>,
    /// Whether its clock is synchronised, and its estimated error (s).
    clock_synchronised: bool,
    pub(crate) clock_error_s: f64,
    /// When its configuration was last loaded, and the last error.
    config_loaded: String,
    config_error: Option<String>,
    /// How long the lease lasts unless renewed (s, 5 to 3600).
    pub(crate) lease_s: u64,
}

/// The agents whose lease lapsed, with when it ran out (a fleet
/// archive's grid marks their measurements).
pub(crate) async fn lapsed(s: &Shared) -> Vec<(String, u64)> {
    let now = clock::now_ms();
    s.archive
        .agents()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.lease_until_ms < now)
        .map(|a| (a.name, a.lease_until_ms))
        .collect()
}

/// Whether an archive's URL reaches it over IPv6 (or IPv4), for the
/// address a registration leaves from: its IP address's family, or that
/// of the first address its host name resolves to (within 2 s) of a
/// family this host has a mesh address in.
async fn archive_family(url: &str, own: &[std::net::IpAddr]) -> Option<bool> {
    let host = reqwest::Url::parse(url)
        .ok()?
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Some(ip.is_ipv6());
    }
    let found: Vec<std::net::SocketAddr> = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::lookup_host((host.as_str(), 0)),
    )
    .await
    .ok()?
    .ok()?
    .collect();
    found
        .into_iter()
        .map(|a| a.ip().to_canonical().is_ipv6())
        .find(|v6| own.iter().any(|ip| ip.is_ipv6() == *v6))
}

/// Registers this agent with each archive it forwards to, and renews the
/// lease a third of its length before it runs out.
pub(crate) async fn registrar(shared: Arc<Shared>) {
    let lease = shared.options.lease.max(Duration::from_secs(5));
    let mut installed = shared.installed.subscribe();
    // By URL: the pin it was made for, and the client.
    let mut clients: std::collections::HashMap<String, (Option<[u8; 32]>, reqwest::Client)> =
        Default::default();
    let mut failing: std::collections::HashSet<String> = Default::default();
    loop {
        // The goodput archives named now (an HTTP receiver takes no
        // registration).
        let targets: Vec<crate::state::forward::ForwardTarget> = shared
            .targets()
            .into_iter()
            .filter(|t| t.kind == goodput_core::mesh::ArchiveKind::Goodput)
            .collect();
        let loaded = shared.loaded();
        // Each name registers from its own address (of the archive's
        // family), which is how the archive knows it is that agent.
        let own: Vec<std::net::IpAddr> = loaded.mine.iter().flat_map(|m| loaded.ips_of(m)).collect();
        clients.retain(|key, (pin, _)| {
            targets.iter().any(|t| {
                key.strip_prefix(&format!("{} ", t.url))
                    .is_some_and(|name| loaded.mine.iter().any(|m| m == name))
                    && t.pin == *pin
            })
        });
        for t in &targets {
            if loaded
                .mine
                .iter()
                .all(|name| clients.contains_key(&format!("{} {name}", t.url)))
            {
                continue;
            }
            // From this name's address of the archive's family: the
            // family of its IP address, or of the first address its host
            // name resolves to that this host has (unresolved: as the
            // system routes it, which the archive refuses as no one's).
            let family = archive_family(&t.url, &own).await;
            for name in &loaded.mine {
                clients.entry(format!("{} {name}", t.url)).or_insert_with(|| {
                    let from = family.and_then(|v6| {
                        loaded
                            .ips_of(name)
                            .into_iter()
                            .chain(own.iter().copied())
                            .find(|ip| ip.is_ipv6() == v6)
                    });
                    let mut b = reqwest::Client::builder()
                        .connect_timeout(Duration::from_secs(5))
                        .timeout(Duration::from_secs(10))
                        .local_address(from);
                    if let Some(pin) = t.pin {
                        b = b.use_preconfigured_tls(crate::tls::pinned_client_config(pin));
                    }
                    (t.pin, b.build().unwrap_or_default())
                });
            }
        }
        let (config_loaded, config_error) = {
            let inner = shared.lock();
            (
                ms_rfc3339(inner.loaded.loaded_ms),
                inner
                    .config_error
                    .as_ref()
                    .map(|(t, e)| format!("{}: {e}", ms_rfc3339(*t))),
            )
        };
        let clock = crate::clock::state();
        let o = &shared.options;
        let mut services = Vec::new();
        if o.beacon {
            services.push(format!("tcp:{}", o.beacon_port));
            services.push(format!("stamp:{}", o.stamp_port));
        }
        services.extend(o.iperf3_port.map(|p| format!("iperf3:{p}")));
        services.extend(o.quic_port.map(|p| format!("quic:{p}")));
        services.extend(o.owamp_port.map(|p| format!("owamp:{p}")));
        services.extend(o.twamp_port.map(|p| format!("twamp:{p}")));
        let reg = Registration {
            version: env!("CARGO_PKG_VERSION").into(),
            addresses: loaded
                .mine
                .iter()
                .flat_map(|m| loaded.ips_of(m))
                .map(|i| i.to_string())
                .collect(),
            services,
            clock_synchronised: clock.synchronised,
            clock_error_s: clock.estimated_error_us as f64 / 1e6,
            config_loaded,
            config_error,
            lease_s: lease.as_secs(),
        };
        for (key, (_, client)) in &clients {
            let Some((url, name)) = key.split_once(' ') else {
                continue;
            };
            let mut req = client.put(format!("{url}/api/v1/fleet/agents/{name}")).json(&reg);
            if let Some(t) = &o.token {
                req = req.bearer_auth(t);
            }
            let why = match req.send().await {
                Ok(r) if r.status().is_success() => None,
                Ok(r) => Some(format!("HTTP {}", r.status())),
                Err(e) => Some(e.to_string()),
            };
            let key = format!("{url} {name}");
            match why {
                None => {
                    if failing.remove(&key) {
                        log(&format!("registered with {url} as {name} again"));
                    }
                }
                Some(why) => {
                    if failing.insert(key) {
                        log(&format!("cannot register with {url} as {name} (retrying): {why}"));
                    }
                }
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(lease / 3) => {}
            _ = installed.changed() => {}
        }
    }
}
