//! perfSONAR's `dns` test as a goodput `dns` test. pScheduler's spec
//! names the host that asks (`host`, the pair's source), the server it
//! asks (`nameserver`, the pair's destination; none: the host's own
//! resolver), the question (`query`, `record`) and a `timeout`. It asks
//! once per run, and so does the converted test.

use serde_json::{json, Value};

use super::{duration, Fields};
use crate::kind::Kind;

/// The spec keys that name the ends of a dns test: the host that runs it,
/// and the server it asks.
pub(super) const ENDS: (&str, &str) = ("host", "nameserver");

/// The goodput document of a `dns` test's spec.
pub(super) fn test(f: &mut Fields, place: &str, notes: &mut Vec<String>) -> Result<(Kind, Value), String> {
    // The host that runs it is the pair's source: where the task runs.
    let _ = f.get("host");
    let _ = f.get("host-node");
    let query = f
        .get("query")
        .and_then(Value::as_str)
        .filter(|q| !q.trim().is_empty())
        .ok_or("no spec.query")?;
    let record = f
        .get("record")
        .and_then(Value::as_str)
        .ok_or("no spec.record")?
        .to_ascii_uppercase();
    crate::dns::record_type(&record).map_err(|e| format!("spec.record: {e}"))?;
    let mut d = json!({ "kind": Kind::Dns, "name": query, "record": record, "count": 1, "retries": 0 });
    if let Some(ns) = f.get("nameserver").and_then(Value::as_str) {
        if ns != "{{dest}}" {
            notes.push(format!(
                "{place}: spec.nameserver {ns:?} is kept as written (goodput puts the pair's destination where {{{{dest}}}} is)"
            ));
        }
        d["server"] = json!(ns);
    }
    if let Some(t) = f.get("timeout") {
        d["timeout"] = json!(duration(t).map_err(|e| format!("spec.timeout: {e}"))?);
    }
    match f.get("ip-version").and_then(Value::as_u64) {
        Some(4) => d["family"] = json!("ipv4"),
        Some(6) => d["family"] = json!("ipv6"),
        _ => {}
    }
    let rest = f.rest();
    if !rest.is_empty() {
        notes.push(format!(
            "{place}: spec fields not carried over: {}",
            rest.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok((Kind::Dns, d))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{import_psconfig, ImportChoices};
    use crate::kind::Kind;
    use crate::spec::TestSpec;

    #[test]
    fn a_dns_test_asks_the_pairs_destination_from_its_source() {
        // The shape of DOEnet's and ESnet's templates: the host that asks
        // is address[0], the nameserver address[1].
        let t = json!({
            "addresses": { "a": { "address": "192.0.2.1" }, "ns": { "address": "192.0.2.53", "no-agent": true } },
            "groups": { "g": { "type": "disjoint", "a-addresses": [{ "name": "a" }], "b-addresses": [{ "name": "ns" }] } },
            "tests": {
                "v4": { "type": "dns", "spec": { "host": "{% address[0] %}", "nameserver": "{% address[1] %}",
                         "query": "fasterdata.es.net", "record": "a", "timeout": "PT2S", "ip-version": 4 } },
                "sys": { "type": "dns", "spec": { "host": "{% address[0] %}", "query": "es.net", "record": "mx" } },
                "bad": { "type": "dns", "spec": { "host": "{% address[0] %}", "query": "es.net", "record": "axfr" } }
            },
            "schedules": { "s": { "repeat": "PT5M" } },
            "tasks": {
                "t": { "group": "g", "test": "v4", "schedule": "s" }
            }
        });
        let i = import_psconfig(&t, ImportChoices::default()).unwrap();
        assert_eq!(
            i.config.tests["v4"],
            json!({ "kind": "dns", "name": "fasterdata.es.net", "record": "A", "count": 1, "retries": 0,
                    "server": "{{dest}}", "timeout": "2s", "family": "ipv4" })
        );
        assert_eq!(i.config.tests["sys"]["record"], "MX");
        assert!(i.config.tests["sys"].get("server").is_none());
        assert!(!i.config.tests.contains_key("bad"));
        assert!(
            i.notes
                .iter()
                .any(|n| n.starts_with("tests.bad: spec.record: unknown record type 'AXFR'")),
            "{:?}",
            i.notes
        );
        let pairs = i.config.tasks_for(&["a".to_owned()]).unwrap();
        assert_eq!(pairs.len(), 1, "{pairs:?}");
        let TestSpec::Dns(d) = &pairs[0].spec else {
            panic!("{:?}", pairs[0].spec)
        };
        assert_eq!(pairs[0].spec.kind(), Kind::Dns);
        assert_eq!(d.server.as_deref(), Some("192.0.2.53"));
        assert_eq!(d.name, "fasterdata.es.net");
    }
}
