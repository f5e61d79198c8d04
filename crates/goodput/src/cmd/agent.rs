//! `goodput agent --check-config`: reads a mesh configuration, finds which
//! of its addresses this host is, and prints the tasks it would run and
//! with whom.

use super::{usage, Stop, EXIT_OK};
use crate::flags::AgentArgs;
use anyhow::anyhow;
use goodput_core::mesh::{Lead, MeshConfig, PairTask};
use goodput_core::schedule::RunClass;
use std::io::Read;

pub(crate) fn agent(args: &AgentArgs) -> Result<u8, Stop> {
    if !args.check_config {
        return Err(usage(
            "the agent daemon is not built yet: `goodput agent --config FILE --check-config` \
             checks a configuration and prints the tasks this host would run",
        ));
    }
    let name = args.config.display().to_string();
    let from_stdin = goodput_report::is_stdout(&args.config);
    let text = if from_stdin {
        let mut t = String::new();
        std::io::stdin()
            .read_to_string(&mut t)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read standard input: {e}")))?;
        t
    } else {
        std::fs::read_to_string(&args.config).map_err(|e| Stop::Fatal(anyhow!("cannot read {name}: {e}")))?
    };
    let toml = if from_stdin {
        !text.trim_start().starts_with('{')
    } else {
        args.config
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    };
    let config = MeshConfig::read(&text, toml).map_err(|e| match e.field.as_str() {
        "" => usage(format!("{name}: {}", e.message)),
        f => usage(format!("{name}: {f}: {}", e.message)),
    })?;
    let (identities, how) = match args.identity.is_empty() {
        true => (own_identities(), "this host's interface addresses and host name"),
        false => (args.identity.clone(), "--as"),
    };
    // An identity may be an address's name as well as its address.
    let mut mine = config.addresses_of(&identities);
    for i in &identities {
        if config.addresses.contains_key(i.as_str()) && !mine.contains(i) {
            mine.push(i.clone());
        }
    }
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
    Ok(EXIT_OK)
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
        let schedule = format!(
            "every {}{}{}",
            human(r.every),
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

/// This host's interface addresses and host name.
fn own_identities() -> Vec<String> {
    let mut out: Vec<String> = if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip().to_string()).collect())
        .unwrap_or_default();
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        out.push(name.trim().to_owned());
    }
    out
}
