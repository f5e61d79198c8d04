//! `goodput agent`: the measurement agent daemon (`goodput_agent::run`),
//! its dry run (`--check-config`: the tasks this host would run and with
//! whom), and `goodput agent run`, the client that asks an agent for a run.

use super::{runtime, usage, watch_signals, Stop, EXIT_FAILED, EXIT_OK};
use crate::flags::{AgentAction, AgentArgs, AgentRunArgs, ImportPsconfigArgs};
use anyhow::anyhow;
use goodput_agent::{AgentOptions, ConfigSource, Limits};
use goodput_core::kind::Kind;
use goodput_core::mesh::{Lead, MeshConfig, PairTask};
use goodput_core::schedule::RunClass;
use std::io::Read;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub(crate) fn agent(args: &AgentArgs) -> Result<u8, Stop> {
    match &args.action {
        Some(AgentAction::Run(r)) => return agent_run(r),
        Some(AgentAction::ImportPsconfig(i)) => return import_psconfig(i),
        None => {}
    }
    if args.new_token {
        return new_token(args);
    }
    if args.check_config {
        return check_config(args);
    }
    if args.print_fingerprint {
        let options = AgentOptions {
            archive: args.archive.clone(),
            tls_cert: args.tls_cert.clone().zip(args.tls_key.clone()),
            ..AgentOptions::default()
        };
        let names: Vec<String> = args.identity.clone();
        let f =
            goodput_agent::certificate_fingerprint(&options, &names).map_err(|e| Stop::Fatal(anyhow!(e)))?;
        goodput_report::console_line(&f);
        return Ok(EXIT_OK);
    }
    let config = args.config.clone().unwrap_or_default();
    if config == "-" {
        return Err(usage(
            "--config - (standard input) is for --check-config; the agent reads a file or a URL",
        ));
    }
    let token = read_token(args.token_file.as_ref())?;
    let allow = args
        .allow
        .iter()
        .map(|a| a.parse().map_err(|e: String| usage(format!("--allow {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let windows = args
        .window
        .iter()
        .map(|w| w.parse().map_err(|e: String| usage(format!("--window {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let max_bitrate = args
        .max_bitrate
        .iter()
        .map(|t| {
            let bad = || {
                usage(format!(
                    "--max-bitrate '{t}': expected KIND=RATE, e.g. udp=100Mbit"
                ))
            };
            let (name, rate) = t.split_once('=').ok_or_else(bad)?;
            let limited = || Kind::ALL.into_iter().filter(|k| k.rate_limited());
            let Some(kind) = limited().find(|k| k.name() == name) else {
                return Err(usage(format!(
                    "--max-bitrate '{t}': '{name}' is not one of {}",
                    Kind::names(limited())
                )));
            };
            let rate: goodput_core::units::BitRate = rate.parse().map_err(|_| bad())?;
            Ok((kind, rate.0))
        })
        .collect::<Result<Vec<_>, Stop>>()?;
    let role = match args.role.as_str() {
        "archive" => goodput_agent::Role::Archive,
        _ => goodput_agent::Role::Agent,
    };
    if role == goodput_agent::Role::Archive {
        if token.is_none() {
            return Err(usage(
                "--role archive needs --token-file: an archive takes runs only from agents that present the mesh's token",
            ));
        }
        if !args.forward_to.is_empty() {
            return Err(usage(
                "--forward-to is for agents; an archive stores what it is sent",
            ));
        }
    }
    if let Some(db) = &args.database {
        let known = ["postgres://", "postgresql://", "sqlite://"];
        if !known.iter().any(|k| db.starts_with(k)) {
            return Err(usage(format!(
                "--database '{}': expected postgres://USER:PASSWORD@HOST:PORT/DB or sqlite://PATH",
                db.split_once('@').map_or(db.as_str(), |(_, h)| h)
            )));
        }
        if role == goodput_agent::Role::Agent && !db.starts_with("sqlite://") {
            return Err(usage(
                "--database postgres://… is for --role archive: an agent keeps its own runs in --archive and \
                 forwards them with --forward-to",
            ));
        }
    }
    let forward = args
        .forward_to
        .iter()
        .map(|t| t.parse().map_err(|e: String| usage(format!("--forward-to {e}"))))
        .collect::<Result<Vec<goodput_agent::ForwardTarget>, _>>()?;
    if !forward.is_empty() && token.is_none() {
        return Err(usage(
            "--forward-to needs --token-file: the archive takes runs only with the mesh's token",
        ));
    }
    let pscheduler = if args.pscheduler_listen.is_empty() {
        None
    } else {
        let allow = args
            .pscheduler_allow
            .iter()
            .map(|a| {
                a.parse()
                    .map_err(|e: String| usage(format!("--pscheduler-allow {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if allow.is_empty() && args.allow.is_empty() {
            return Err(usage(
                "--pscheduler-listen needs --pscheduler-allow or --allow: pScheduler's API has no token, \
                 so the leads that may use it must be named by address",
            ));
        }
        if args.iperf3 && args.iperf3_port == args.pscheduler_iperf3_port {
            return Err(usage(format!(
                "--pscheduler-iperf3-port {} is the beacon's --iperf3-port too: give pScheduler's runs a port of their own",
                args.pscheduler_iperf3_port
            )));
        }
        Some(goodput_agent::PsOptions {
            listen: args.pscheduler_listen.clone(),
            allow,
            iperf3_port: args.pscheduler_iperf3_port,
            max_tasks: args.pscheduler_max_tasks.max(1),
        })
    };
    let options = AgentOptions {
        pscheduler,
        role,
        database: args.database.clone(),
        forward,
        forward_backlog: args.forward_backlog.max(1),
        lease: args
            .lease
            .0
            .clamp(Duration::from_secs(5), Duration::from_secs(3600)),
        config: ConfigSource::parse(&config),
        identities: args.identity.clone(),
        archive: args.archive.clone(),
        api_listen: args.api_listen.clone(),
        plain_api_listen: args.plain_api_listen.clone(),
        tls_cert: args.tls_cert.clone().zip(args.tls_key.clone()),
        token,
        limits: Limits {
            allow,
            max_held: args.max_held,
            max_running: args.max_running.max(1),
            max_background: args.max_background.max(1),
            runs_per_hour: args.runs_per_hour,
            exclusive_s_per_day: args.exclusive_per_day.0.as_secs(),
            max_duration: args.max_run_length.0,
            windows,
            max_bitrate,
            max_body: usize::try_from(args.max_body.0.max(64 << 10)).unwrap_or(usize::MAX),
            max_requests: args.max_requests.max(1),
            writes_per_minute: args.writes_per_minute.max(1),
            ingest_per_minute: args.ingest_per_minute.max(1),
        },
        connections: goodput_agent::ConnLimits {
            max_connections: args.max_connections.max(1),
            per_address: args.max_connections_per_address.max(1),
            requests_per_address: args.max_requests_per_address.max(1),
            header_timeout: args.header_timeout.0.max(Duration::from_millis(100)),
            body_timeout: args.body_timeout.0.max(Duration::from_millis(100)),
            ..goodput_agent::ConnLimits::default()
        },
        beacon: !args.no_beacon,
        beacon_port: args.beacon_port,
        stamp_port: args.stamp_port,
        iperf3_port: args.iperf3.then_some(args.iperf3_port),
        quic_port: args.quic.then_some(args.quic_port),
        owamp_port: args.owamp.then_some(args.owamp_port),
        twamp_port: args.twamp.then_some(args.twamp_port),
        ndt7_port: args.ndt7.then_some(args.ndt7_port),
        reload_every: args.reload_every.0.max(Duration::from_secs(1)),
        retention: goodput_archive::Retention {
            max_age_ms: args.keep.0.as_millis().min(u128::from(u64::MAX)) as u64,
            max_bytes: args.archive_limit.map_or(
                if role == goodput_agent::Role::Archive {
                    100 << 30
                } else {
                    1 << 30
                },
                |l| l.0,
            ),
        },
    };
    let rt = runtime()?;
    rt.block_on(async move {
        let cancel = CancellationToken::new();
        watch_signals(cancel.clone());
        goodput_agent::run(options, cancel).await
    })
    .map_err(|e| Stop::Fatal(anyhow!(e)))?;
    Ok(EXIT_OK)
}

/// Where `--new-token` writes without `--out`: where the package's
/// defaults file has the agent read it.
const TOKEN_FILE: &str = "/etc/goodput/token";

/// `goodput agent --new-token`: a new mesh token (32 bytes from the
/// kernel's random source, as 64 hex digits and a newline: what
/// --token-file reads) in a new file of mode 0600.
fn new_token(args: &AgentArgs) -> Result<u8, Stop> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = args.out.clone().unwrap_or_else(|| TOKEN_FILE.into());
    let mut bytes = [0u8; 32];
    let mut got = 0;
    // getrandom(2) blocks only until the kernel's pool is seeded, once
    // after boot; a short read is read on from where it stopped.
    for _ in 0..64 {
        // SAFETY: writes at most the rest of `bytes`, which it owns.
        let n = unsafe { libc::getrandom(bytes[got..].as_mut_ptr().cast(), bytes.len() - got, 0) };
        match n {
            n if n > 0 => got += n as usize,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => {
                return Err(Stop::Fatal(anyhow!(
                    "cannot read the kernel's random source: {}",
                    std::io::Error::last_os_error()
                )))
            }
        }
        if got == bytes.len() {
            break;
        }
    }
    if got < bytes.len() {
        return Err(Stop::Fatal(anyhow!(
            "the kernel's random source gave too few bytes"
        )));
    }
    let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n";
    let shown = path.display();
    let cannot = |e: std::io::Error| {
        let hint = match e.kind() {
            std::io::ErrorKind::AlreadyExists => " (it is kept: give --force to replace it, or --out FILE)",
            std::io::ErrorKind::PermissionDenied => " (run as root, or give --out FILE)",
            std::io::ErrorKind::NotFound => " (its directory does not exist)",
            _ => "",
        };
        Stop::Output(anyhow!("cannot write {shown}: {e}{hint}"))
    };
    // Without --force the file is made new (O_EXCL): an existing token,
    // which the mesh's other agents hold, is never lost. With it, a file
    // beside it is written and renamed over it, so a reader sees the old
    // token or the new one, whole.
    let target = if args.force {
        let mut t = path.as_os_str().to_owned();
        t.push(format!(".new-{}", std::process::id()));
        std::path::PathBuf::from(t)
    } else {
        path.clone()
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&target)
        .map_err(cannot)?;
    // The mode whatever the umask said.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(cannot)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(cannot)?;
    drop(f);
    if args.force {
        std::fs::rename(&target, &path).map_err(|e| {
            let _ = std::fs::remove_file(&target);
            cannot(e)
        })?;
    }
    goodput_report::console_line(&format!(
        "A new mesh token is in {shown} (mode 0600, readable only by its owner).\n\
         Every agent of the mesh needs the same token: copy this file to each host \
         (e.g. `scp {shown} HOST:{TOKEN_FILE}`), readable by the user the agent runs as \
         (the package's service runs as `goodput`: `chown goodput: {TOKEN_FILE}`), \
         and start each agent with `--token-file {TOKEN_FILE}` (the package's \
         /etc/default/goodput-agent does)."
    ));
    Ok(EXIT_OK)
}

/// The token in a file (its first line; empty: none).
fn read_token(file: Option<&std::path::PathBuf>) -> Result<Option<String>, Stop> {
    let Some(f) = file else { return Ok(None) };
    let text = std::fs::read_to_string(f).map_err(|e| usage(format!("--token-file {}: {e}", f.display())))?;
    let t = text.lines().next().unwrap_or("").trim().to_owned();
    if t.len() < 16 {
        return Err(usage(format!(
            "--token-file {}: the token must be at least 16 characters",
            f.display()
        )));
    }
    Ok(Some(t))
}

/// `goodput agent run`: asks the agent for the run, waits for its end,
/// prints its figures (or the whole run with --json).
fn agent_run(args: &AgentRunArgs) -> Result<u8, Stop> {
    let name = args.spec.display().to_string();
    let text = if goodput_report::is_stdout(&args.spec) {
        let mut t = String::new();
        std::io::stdin()
            .read_to_string(&mut t)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read standard input: {e}")))?;
        t
    } else {
        std::fs::read_to_string(&args.spec).map_err(|e| Stop::Fatal(anyhow!("cannot read {name}: {e}")))?
    };
    let toml = !text.trim_start().starts_with('{');
    let specs = goodput_core::spec::read_document(&text, toml).map_err(|e| usage(format!("{name}: {e}")))?;
    let [spec] = &specs[..] else {
        return Err(usage(format!("{name}: one test, please ({} found)", specs.len())));
    };
    let token = read_token(args.token_file.as_ref())?;
    let base = args.agent.trim_end_matches('/').to_owned();
    let body = serde_json::json!({
        "spec": spec,
        "dest": args.dest,
        "slip": format!("{}ms", args.slip.0.as_millis()),
    });
    let rt = runtime()?;
    let json = args.json;
    let pin = args.pin.clone();
    rt.block_on(async move {
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(30));
        if let Some(pin) = &pin {
            let tls = goodput_agent::pinned_tls(pin).map_err(|e| usage(format!("--pin {e}")))?;
            builder = builder.use_preconfigured_tls(tls);
        }
        let http = builder.build().map_err(|e| Stop::Fatal(anyhow!(e)))?;
        let mut req = http.post(format!("{base}/api/v1/runs")).json(&body);
        if let Some(t) = &token {
            req = req.bearer_auth(t);
        }
        let answer = req
            .send()
            .await
            .map_err(|e| Stop::Fatal(anyhow!("{base}: {e}")))?;
        let status = answer.status();
        let v = goodput_agent::json_capped(answer, ANSWER_LIMIT).await;
        if !status.is_success() {
            let e = v["error"].as_str().unwrap_or("no reason given");
            return Err(Stop::Fatal(anyhow!(
                "{base} refused the run (HTTP {status}): {e}"
            )));
        }
        let id = v["id"].as_str().unwrap_or_default().to_owned();
        if v["state"] == "non_start" {
            goodput_report::console_line(&format!(
                "run {id} did not start: {}",
                v["reason"].as_str().unwrap_or("")
            ));
            return Ok(EXIT_FAILED);
        }
        eprintln!(
            "run {id} booked for {} (ms since the Unix epoch), until {}",
            v["start_ms"], v["end_ms"]
        );
        let deadline = v["end_ms"].as_u64().unwrap_or(0) + 30_000;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let r: serde_json::Value = match http.get(format!("{base}/api/v1/runs/{id}")).send().await {
                Ok(a) if a.status().is_success() => goodput_agent::json_capped(a, ANSWER_LIMIT).await,
                _ => serde_json::Value::Null,
            };
            let state = r["state"].as_str().unwrap_or("");
            if ["finished", "failed", "missed", "non_start", "cancelled"].contains(&state) {
                if json {
                    goodput_report::console_line(&serde_json::to_string_pretty(&r).unwrap_or_default());
                } else {
                    let mut out = format!("run {id}: {state}");
                    if let Some(why) = r["reason"].as_str() {
                        out += &format!(": {why}");
                    }
                    for (k, v) in r["figures"].as_object().into_iter().flatten() {
                        if !v.is_null() {
                            out += &format!("\n  {k}: {v}");
                        }
                    }
                    goodput_report::console_line(&out);
                }
                return Ok(if state == "finished" { EXIT_OK } else { EXIT_FAILED });
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            if now > deadline {
                return Err(Stop::Fatal(anyhow!("run {id} had not ended 30 s after its slot")));
            }
        }
    })
}

/// `--check-config`: the configuration checked, and this host's tasks.
fn check_config(args: &AgentArgs) -> Result<u8, Stop> {
    let config = args.config.clone().unwrap_or_default();
    let name = config.clone();
    let from_stdin = config == "-";
    let source = ConfigSource::parse(&config);
    let rt = runtime()?;
    // The agent's own reader: a file or a URL, a mesh document or a
    // pSConfig template (told by its content) with its includes.
    let (text, toml) = if from_stdin {
        let mut t = String::new();
        std::io::stdin()
            .read_to_string(&mut t)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read standard input: {e}")))?;
        let toml = !t.trim_start().starts_with('{');
        (t, toml)
    } else {
        rt.block_on(goodput_agent::fetch_document(&source))
            .map_err(|e| Stop::Fatal(anyhow!(e)))?
    };
    let (config, notes) = rt
        .block_on(goodput_agent::read_config(&source, text, toml))
        .map_err(usage)?;
    drop(rt);
    for n in &notes {
        eprintln!("goodput: note: {n}");
    }
    let (identities, how) = match args.identity.is_empty() {
        true => (
            goodput_agent::own_identities(),
            "this host's interface addresses and host name",
        ),
        false => (args.identity.clone(), "--as"),
    };
    // An identity may be an address's name as well as its address.
    let mine = goodput_agent::mine(&config, &identities);
    let tasks = config
        .tasks_for(&mine)
        .map_err(|e| usage(format!("{name}: {}: {}", e.field, e.message)))?;
    let mut out = format!(
        "{name}: valid: {} addresses, {} groups, {} tests, {} schedules, {} tasks\n",
        config.addresses.len(),
        config.groups.len(),
        config.tests.len(),
        config.schedules.len(),
        config.tasks.len()
    );
    if mine.is_empty() {
        out += &format!(
            "This host is none of the configured addresses (looked for: {}; from {how}): it runs no task.\n",
            identities.join(", ")
        );
    } else {
        let named: Vec<String> = mine
            .iter()
            .map(|n| format!("{n} ({})", config.addresses[n].address))
            .collect();
        out += &format!("This host is {} (from {how}).\n", named.join(", "));
        out += &format!("It runs {} task pairs:\n", tasks.len());
        out += &table(&config, &tasks);
    }
    // Who tests to this host (it is their beacon).
    let everyone: Vec<String> = config.addresses.keys().cloned().collect();
    let all = config
        .tasks_for(&everyone)
        .map_err(|e| usage(format!("{name}: {}: {}", e.field, e.message)))?;
    let mut from: Vec<&str> = all
        .iter()
        .filter(|t| t.dest.as_ref().is_some_and(|d| mine.contains(d)))
        .map(|t| t.source.as_str())
        .collect();
    let tested = from.len();
    from.sort_unstable();
    from.dedup();
    if tested > 0 {
        out += &format!(
            "Others test to it: {tested} task pairs from {}.\n",
            from.join(", ")
        );
    }
    goodput_report::console_line(out.trim_end());
    // What would make the agent's runs fail, one line each on standard
    // error; a fleet archive runs no tests, so none of them applies.
    if args.role == "archive" {
        return Ok(EXIT_OK);
    }
    let token = read_token(args.token_file.as_ref())?;
    let concerns = goodput_agent::concerns(
        &config,
        &mine,
        &identities,
        token.is_some(),
        goodput_agent::clock_synchronised(),
    );
    for c in &concerns {
        let what = if c.fatal { "problem" } else { "warning" };
        eprintln!("goodput: {what}: {}", c.text);
    }
    Ok(if concerns.iter().any(|c| c.fatal) {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// The tasks as an aligned table.
fn table(config: &MeshConfig, tasks: &[PairTask]) -> String {
    let mut rows = vec![[
        "task".to_string(),
        "kind".into(),
        "class".into(),
        "with".into(),
        "schedule".into(),
        "books the slot".into(),
    ]];
    for t in tasks {
        let with = match &t.dest {
            None => "(single-ended)".to_string(),
            Some(d) => format!(
                "{d} ({}, {})",
                config.addresses[d].address,
                if t.dest_has_agent {
                    "agent"
                } else {
                    "no agent: no negotiation"
                }
            ),
        };
        let r = t.repeat;
        let cron = config
            .tasks
            .get(&t.task)
            .and_then(|k| config.schedules.get(&k.schedule))
            .and_then(|s| s.cron.clone());
        let schedule = format!(
            "{}{}{}",
            match cron {
                Some(c) => format!("cron {c}"),
                None => format!("every {}", human(r.every)),
            },
            if r.slip > 0 {
                format!(", slip {}", human(r.slip))
            } else {
                String::new()
            },
            if r.sliprand { ", spread" } else { "" }
        );
        let lead = match (t.lead, t.dest_has_agent) {
            (_, false) | (Lead::Source, _) => "this host",
            (Lead::Destination, true) => "the destination",
        };
        rows.push([
            t.task.clone(),
            t.spec.kind().into(),
            match t.class {
                RunClass::Exclusive => "exclusive",
                RunClass::Normal => "normal",
                RunClass::Background => "background",
            }
            .into(),
            with,
            schedule,
            lead.into(),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            format!("  {}\n", cells.join("  ").trim_end())
        })
        .collect()
}

/// Milliseconds as the largest whole unit.
fn human(ms: u64) -> String {
    match ms {
        m if m >= 86_400_000 && m % 86_400_000 == 0 => format!("{} d", m / 86_400_000),
        m if m >= 3_600_000 && m % 3_600_000 == 0 => format!("{} h", m / 3_600_000),
        m if m >= 60_000 && m % 60_000 == 0 => format!("{} min", m / 60_000),
        m if m % 1000 == 0 => format!("{} s", m / 1000),
        m => format!("{m} ms"),
    }
}

/// `goodput agent import-psconfig`: a pSConfig template as a mesh
/// configuration, with a note for each thing not carried over.
fn import_psconfig(args: &ImportPsconfigArgs) -> Result<u8, Stop> {
    let source = ConfigSource::parse(&args.template);
    let rt = runtime()?;
    let (text, _) = rt
        .block_on(goodput_agent::fetch_document(&source))
        .map_err(|e| Stop::Fatal(anyhow!(e)))?;
    let choices = goodput_core::psconfig::ImportChoices {
        throughput_iperf3: args.throughput == Kind::Iperf3.name(),
        rtt_stamp: args.rtt == Kind::Stamp.name(),
    };
    // Its includes read and merged as pSConfig's agents merge them.
    let imported = rt
        .block_on(goodput_agent::convert_psconfig(&source, &text, choices))
        .map_err(|e| Stop::Fatal(anyhow!(e)))?;
    drop(text);
    // Only what the template said: the agent and alert sections keep
    // their defaults, so they are left out.
    let mut doc = serde_json::to_value(&imported.config).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    if let Some(m) = doc.as_object_mut() {
        m.remove("agent");
        m.remove("alerts");
    }
    let body = toml::to_string(&doc).map_err(|e| Stop::Fatal(anyhow!("cannot write TOML: {e}")))?;
    let c = &imported.config;
    let mut out = format!(
        "# goodput mesh configuration imported from the pSConfig template {source}\n\
         # {} addresses, {} groups, {} tests, {} schedules, {} tasks\n",
        c.addresses.len(),
        c.groups.len(),
        c.tests.len(),
        c.schedules.len(),
        c.tasks.len()
    );
    if !imported.notes.is_empty() {
        out += &format!(
            "# Not carried over, or carried over differently ({}):\n",
            imported.notes.len()
        );
        for n in &imported.notes {
            out += &format!("#   {n}\n");
        }
    }
    out += "\n";
    out += &body;
    for n in &imported.notes {
        eprintln!("goodput: {n}");
    }
    match &args.output {
        Some(p) => {
            std::fs::write(p, out).map_err(|e| Stop::Output(anyhow!("cannot write {}: {e}", p.display())))?
        }
        None => print!("{out}"),
    }
    eprintln!(
        "goodput: imported {} tasks ({} notes)",
        c.tasks.len(),
        imported.notes.len()
    );
    Ok(EXIT_OK)
}

/// The most of an agent's answer `agent run` reads (a run with its whole
/// result document).
const ANSWER_LIMIT: u64 = 64 << 20;
