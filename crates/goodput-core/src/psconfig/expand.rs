//! pSConfig's own expansion of a group into the address combinations a
//! task runs between: selectors by name and label or by address class,
//! a group's default label, `excludes`, `excludes-self` (by host by
//! default), and what `hosts` add to an address (`no-agent`, `disabled`,
//! tags). Written from pSConfig's published schema and its documented
//! behaviour; the counts are bounded by arithmetic before anything is
//! built.

use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// How deep address-class filters may nest (`and`, `or`, `not`,
/// `address-class`): deeper is refused, so a filter that names its own
/// class cannot recurse without end.
const MAX_FILTER_DEPTH: usize = 16;

/// One address of the template with what its host adds.
#[derive(Debug, Clone)]
pub(super) struct Addr {
    pub address: String,
    pub host: Option<String>,
    pub disabled: bool,
    pub no_agent: bool,
    /// Its own tags and its host's, lower-cased (filters compare so).
    pub tags: Vec<String>,
    /// Label → (address, disabled, no-agent).
    pub labels: BTreeMap<String, (String, bool, bool)>,
    /// The address used toward a peer (by the peer's name), and its
    /// labels: a circuit's own end.
    pub remotes: BTreeMap<String, Remote>,
}

/// An address's entry for one peer (`remote-addresses`).
#[derive(Debug, Clone)]
pub(super) struct Remote {
    pub address: Option<String>,
    pub labels: BTreeMap<String, (String, bool, bool)>,
    pub disabled: bool,
    pub no_agent: bool,
}

fn labels_of(v: &Value) -> BTreeMap<String, (String, bool, bool)> {
    v.get("labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(l, v)| {
            let x = v.get("address").and_then(Value::as_str)?;
            Some((
                l.clone(),
                (x.to_owned(), flag(v, "disabled"), flag(v, "no-agent")),
            ))
        })
        .collect()
}

/// One end of a combination: the address's name, the label it is used
/// with, and what that gives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct End {
    pub name: String,
    pub label: Option<String>,
    pub address: String,
    pub host: Option<String>,
    pub disabled: bool,
    pub no_agent: bool,
}

/// The template's addresses and hosts, read once.
pub(super) struct Template<'a> {
    pub addrs: BTreeMap<String, Addr>,
    classes: Option<&'a Map<String, Value>>,
}

fn flag(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool) == Some(true)
}

fn tags_of(v: &Value) -> impl Iterator<Item = String> + '_ {
    v.get("tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_lowercase)
}

impl<'a> Template<'a> {
    pub(super) fn read(top: &'a Map<String, Value>) -> Self {
        let hosts = top.get("hosts").and_then(Value::as_object);
        let mut addrs = BTreeMap::new();
        for (name, a) in top
            .get("addresses")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let Some(address) = a.get("address").and_then(Value::as_str) else {
                continue;
            };
            let host_name = a.get("host").and_then(Value::as_str);
            let host = host_name.and_then(|h| hosts.and_then(|m| m.get(h)));
            let mut tags: Vec<String> = tags_of(a).collect();
            if let Some(h) = host {
                tags.extend(tags_of(h));
            }
            let labels = labels_of(a);
            let remotes = a
                .get("remote-addresses")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(peer, r)| {
                    (
                        peer.clone(),
                        Remote {
                            address: r.get("address").and_then(Value::as_str).map(str::to_owned),
                            labels: labels_of(r),
                            disabled: flag(r, "disabled"),
                            no_agent: flag(r, "no-agent"),
                        },
                    )
                })
                .collect();
            addrs.insert(
                name.clone(),
                Addr {
                    address: address.to_owned(),
                    host: host_name.map(str::to_owned),
                    disabled: flag(a, "disabled") || host.is_some_and(|h| flag(h, "disabled")),
                    no_agent: flag(a, "no-agent") || host.is_some_and(|h| flag(h, "no-agent")),
                    tags,
                    labels,
                    remotes,
                },
            );
        }
        Self {
            addrs,
            classes: top.get("address-classes").and_then(Value::as_object),
        }
    }

    /// The most addresses a selector list may select: a class may select
    /// every address.
    pub(super) fn bound(&self, list: Option<&Value>) -> u64 {
        list.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|s| {
                if s.get("class").is_some() {
                    self.addrs.len() as u64
                } else {
                    1
                }
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The most combinations a group makes, by arithmetic.
    pub(super) fn group_bound(&self, g: &Value) -> u64 {
        match g.get("type").and_then(Value::as_str) {
            Some("mesh") => {
                let n = self.bound(g.get("addresses"));
                n.saturating_mul(n)
            }
            Some("disjoint") => self
                .bound(g.get("a-addresses"))
                .saturating_mul(self.bound(g.get("b-addresses")))
                .saturating_mul(2),
            _ => self.bound(g.get("addresses")),
        }
    }

    /// The (name, label) pairs a selector list picks, in order.
    fn select(
        &self,
        list: Option<&Value>,
        place: &str,
        notes: &mut Vec<String>,
    ) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        for (i, s) in list.and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(class) = s.get("class").and_then(Value::as_str) {
                match self.class(class, 0) {
                    Ok(names) => out.extend(names.into_iter().map(|n| (n, None))),
                    Err(why) => notes.push(format!(
                        "{place}[{i}]: address class '{class}': {why}; it selects nothing"
                    )),
                }
                continue;
            }
            match s.get("name").and_then(Value::as_str) {
                Some(n) if self.addrs.contains_key(n) => out.push((
                    n.to_owned(),
                    s.get("label").and_then(Value::as_str).map(str::to_owned),
                )),
                Some(n) => notes.push(format!("{place}[{i}]: no address named '{n}'; left out")),
                None => notes.push(format!("{place}[{i}]: names no address or class; left out")),
            }
        }
        out
    }

    /// The names of the addresses a class selects.
    fn class(&self, name: &str, depth: usize) -> Result<Vec<String>, String> {
        if depth > MAX_FILTER_DEPTH {
            return Err(format!("filters nest deeper than {MAX_FILTER_DEPTH}"));
        }
        let c = self
            .classes
            .and_then(|m| m.get(name))
            .ok_or_else(|| format!("no class named '{name}'"))?;
        match c.pointer("/data-source/type").and_then(Value::as_str) {
            Some("current-config") => {}
            other => {
                return Err(format!(
                    "data source {other:?} is not current-config (the template's own addresses)"
                ))
            }
        }
        let mut out = Vec::new();
        for (n, a) in &self.addrs {
            let matched = match c.get("match-filter") {
                Some(f) => self.matches(f, a, depth + 1)?,
                None => true,
            };
            let excluded = match c.get("exclude-filter") {
                Some(f) => self.matches(f, a, depth + 1)?,
                None => false,
            };
            if matched && !excluded {
                out.push(n.clone());
            }
        }
        Ok(out)
    }

    fn matches(&self, f: &Value, a: &Addr, depth: usize) -> Result<bool, String> {
        if depth > MAX_FILTER_DEPTH {
            return Err(format!("filters nest deeper than {MAX_FILTER_DEPTH}"));
        }
        let text = |k: &str| f.get(k).and_then(Value::as_str);
        let list = |k: &str| f.get(k).and_then(Value::as_array).into_iter().flatten();
        Ok(match text("type") {
            Some("tag") => match text("tag") {
                Some(t) => a.tags.contains(&t.to_lowercase()),
                None => true,
            },
            Some("host") => {
                // The host's tags only; tags_of mixed both, so a host
                // filter with a tag asks the address to have a host.
                let tag_ok =
                    text("tag").is_none_or(|t| a.host.is_some() && a.tags.contains(&t.to_lowercase()));
                a.host.is_some() && tag_ok && flag(f, "no-agent") == a.no_agent
            }
            Some("ip-version") => {
                let want = f.get("ip-version").and_then(Value::as_u64);
                match a.address.parse::<std::net::IpAddr>() {
                    Ok(std::net::IpAddr::V4(_)) => want == Some(4),
                    Ok(std::net::IpAddr::V6(_)) => want == Some(6),
                    Err(_) => return Err(unresolved("an ip-version", &a.address)),
                }
            }
            Some("netmask") => {
                let mask = text("netmask").ok_or("a netmask filter with no netmask")?;
                in_net(&a.address, mask)?
            }
            Some("and") => {
                let mut all = true;
                for x in list("filters") {
                    all &= self.matches(x, a, depth + 1)?;
                }
                all
            }
            Some("or") => {
                let mut any = false;
                for x in list("filters") {
                    any |= self.matches(x, a, depth + 1)?;
                }
                any
            }
            Some("not") => !self.matches(
                f.get("filter").ok_or("a not filter with no filter")?,
                a,
                depth + 1,
            )?,
            Some("address-class") => {
                let c = text("class").ok_or("an address-class filter with no class")?;
                let names = self.class(c, depth + 1)?;
                self.addrs
                    .iter()
                    .any(|(n, x)| names.contains(n) && std::ptr::eq(x, a))
            }
            Some(other) => return Err(format!("filter type '{other}' is not carried over")),
            None => return Err("a filter with no type".into()),
        })
    }

    /// An address used with a label toward a peer, as pSConfig picks it:
    /// the address's entry for that peer first (`remote-addresses`, its
    /// label or its address), then its own label, then itself. An end
    /// picked from a peer's entry is named `NAME>PEER`, its own address
    /// in goodput's configuration. `None`: pSConfig leaves it out.
    fn end(&self, name: &str, label: Option<&str>, peer: Option<&str>) -> Option<End> {
        let a = self.addrs.get(name)?;
        let make = |n: String, l: Option<&str>, (address, d, na): (String, bool, bool)| End {
            name: n,
            label: l.map(str::to_owned),
            address,
            host: a.host.clone(),
            disabled: a.disabled || d,
            no_agent: a.no_agent || na,
        };
        if let Some(r) = peer.and_then(|p| a.remotes.get(p)) {
            let n = format!("{name}>{}", peer.unwrap_or_default());
            match (label, &r.address) {
                (Some(l), _) if r.labels.contains_key(l) => {
                    let (x, d, na) = r.labels[l].clone();
                    return Some(make(n, None, (x, d || r.disabled, na || r.no_agent)));
                }
                (None, Some(x)) => return Some(make(n, None, (x.clone(), r.disabled, r.no_agent))),
                (Some(_), None) => return None,
                _ => {}
            }
        }
        match label {
            Some(l) => {
                let (x, d, na) = a.labels.get(l)?.clone();
                Some(make(name.to_owned(), Some(l), (x, d, na)))
            }
            None => Some(make(name.to_owned(), None, (a.address.clone(), false, false))),
        }
    }

    /// The combinations a group makes, as pSConfig makes them: one end
    /// (a list) or two (a mesh, a disjoint group). Disabled ends are
    /// kept; the caller skips them as pSConfig does per task.
    pub(super) fn expand(
        &self,
        g: &Value,
        place: &str,
        notes: &mut Vec<String>,
    ) -> Result<Vec<Vec<End>>, String> {
        let default_label = g.get("default-address-label").and_then(Value::as_str);
        // The two ends of a pair, each resolved toward the other.
        let pair = |x: &(String, Option<String>), y: &(String, Option<String>)| -> Option<(End, End)> {
            let a = self.end(&x.0, x.1.as_deref().or(default_label), Some(&y.0))?;
            let b = self.end(&y.0, y.1.as_deref().or(default_label), Some(&x.0))?;
            Some((a, b))
        };
        let scope = g.get("excludes-self").and_then(Value::as_str).unwrap_or("host");
        let mut excluded: BTreeSet<(String, Option<String>, String, Option<String>)> = BTreeSet::new();
        for (i, x) in g
            .get("excludes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let local = x.get("local-address");
            let (Some(ln), ll) = (
                local.and_then(|l| l.get("name")).and_then(Value::as_str),
                local.and_then(|l| l.get("label")).and_then(Value::as_str),
            ) else {
                notes.push(format!("{place}.excludes[{i}]: no local-address name; ignored"));
                continue;
            };
            for t in x
                .get("target-addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(tn) = t.get("name").and_then(Value::as_str) {
                    excluded.insert((
                        ln.to_owned(),
                        ll.map(str::to_owned),
                        tn.to_owned(),
                        t.get("label").and_then(Value::as_str).map(str::to_owned),
                    ));
                }
            }
        }
        let keep = |a: &End, b: &End| -> bool {
            // Excludes name the selectors (name and label as written).
            let base = |e: &End| e.name.split('>').next().unwrap_or_default().to_owned();
            let key = |e: &End| {
                (
                    base(e),
                    e.label.clone().filter(|l| Some(l.as_str()) != default_label),
                )
            };
            let (an, al) = key(a);
            let (bn, bl) = key(b);
            let written = excluded.contains(&(an.clone(), al.clone(), bn.clone(), bl.clone()))
                || excluded.contains(&(base(a), a.label.clone(), base(b), b.label.clone()));
            if written {
                return false;
            }
            match scope {
                "host" => {
                    let same_host = match (&a.host, &b.host) {
                        (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
                        _ => false,
                    };
                    !same_host && a.address != b.address
                }
                "address" => a.address != b.address,
                _ => true,
            }
        };
        let mut out = Vec::new();
        let both_ways =
            |xs: &[(String, Option<String>)], ys: &[(String, Option<String>)], out: &mut Vec<Vec<End>>| {
                for x in xs {
                    for y in ys {
                        if let Some((a, b)) = pair(x, y) {
                            if keep(&a, &b) {
                                out.push(vec![a, b]);
                            }
                        }
                    }
                }
            };
        match g.get("type").and_then(Value::as_str) {
            Some("mesh") => {
                let a = self.select(g.get("addresses"), &format!("{place}.addresses"), notes);
                both_ways(&a, &a, &mut out);
            }
            Some("disjoint") => {
                let a = self.select(g.get("a-addresses"), &format!("{place}.a-addresses"), notes);
                let b = self.select(g.get("b-addresses"), &format!("{place}.b-addresses"), notes);
                both_ways(&a, &b, &mut out);
                if !flag(g, "unidirectional") {
                    both_ways(&b, &a, &mut out);
                }
            }
            Some("list") => {
                let a = self.select(g.get("addresses"), &format!("{place}.addresses"), notes);
                out.extend(
                    a.iter()
                        .filter_map(|(n, l)| self.end(n, l.as_deref().or(default_label), None))
                        .map(|x| vec![x]),
                );
            }
            other => return Err(format!("type {other:?} is not mesh, disjoint or list")),
        }
        Ok(out)
    }
}

/// Why a filter cannot judge a host name: pSConfig resolves it, an
/// import reads no network.
fn unresolved(filter: &str, address: &str) -> String {
    format!("{filter} filter on '{address}' needs its name resolved, which an import does not do")
}

/// Whether an IP address is in a network (`10.0.0.0/8`, `2001:db8::/32`).
fn in_net(address: &str, net: &str) -> Result<bool, String> {
    let (base, bits) = net
        .split_once('/')
        .ok_or_else(|| format!("netmask '{net}' is not an address/prefix"))?;
    let bits: u32 = bits
        .parse()
        .map_err(|_| format!("netmask '{net}': bad prefix length"))?;
    let base: std::net::IpAddr = base
        .parse()
        .map_err(|_| format!("netmask '{net}': bad address"))?;
    let Ok(ip) = address.parse::<std::net::IpAddr>() else {
        return Err(unresolved("a netmask", address));
    };
    let within = |a: u128, b: u128, width: u32| -> Result<bool, String> {
        if bits > width {
            return Err(format!("netmask '{net}': prefix longer than {width} bits"));
        }
        let shift = width - bits;
        Ok(bits == 0 || (a >> shift) == (b >> shift))
    };
    match (ip, base) {
        (std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)) => {
            within(u32::from(a).into(), u32::from(b).into(), 32)
        }
        (std::net::IpAddr::V6(a), std::net::IpAddr::V6(b)) => within(a.into(), b.into(), 128),
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netmask_filters_compare_prefixes() {
        assert!(in_net("10.1.2.3", "10.0.0.0/8").unwrap());
        assert!(!in_net("11.1.2.3", "10.0.0.0/8").unwrap());
        assert!(in_net("2001:db8::1", "2001:db8::/32").unwrap());
        assert!(!in_net("10.1.2.3", "2001:db8::/32").unwrap());
        assert!(in_net("10.1.2.3", "10.0.0.0/40").is_err());
        assert!(in_net("host.example", "10.0.0.0/8").is_err());
    }
}
