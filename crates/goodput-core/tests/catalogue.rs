//! Every name of a figure comes from the one catalogue: `--assert`,
//! `goodput check`, the archive's series and the alert families read it,
//! and no other source file spells a figure's name out.

use std::path::{Path, PathBuf};

use goodput_core::alert::Family;
use goodput_core::catalogue::{self, Quantity, SERIES};
use goodput_core::check::CheckMetric;
use goodput_core::kind::Kind;

/// Every kind that measures something (an alert family of its own): each
/// must have figures of its own. A kind that measures nothing (the server)
/// has only the counts, and is asked no question here.
fn kinds() -> impl Iterator<Item = Kind> {
    Kind::ALL.into_iter().filter(|k| !k.families().is_empty())
}

#[test]
fn goodput_check_takes_the_catalogues_figures_with_their_old_units() {
    // What `goodput check` took before the catalogue, unit for unit.
    let want: [(&str, &str, f64, &str, f64, &str); 14] = [
        ("throughput_up", "Mbit/s", 1e6, "", 1.0, "tcp"),
        ("throughput_down", "Mbit/s", 1e6, "", 1.0, "tcp"),
        ("loss", "%", 1.0, "%", 1.0, "stamp"),
        ("loss_forward", "%", 1.0, "%", 1.0, "stamp"),
        ("loss_backward", "%", 1.0, "%", 1.0, "stamp"),
        ("delay_median", "ms", 1e3, "s", 1e6, "stamp"),
        ("delay_p95", "ms", 1e3, "s", 1e6, "stamp"),
        ("jitter", "ms", 1e3, "s", 1e6, "stamp"),
        ("errors", "", 1.0, "", 1.0, "tcp"),
        ("hops", "", 1.0, "", 1.0, "trace"),
        // One-way delay, apart from the round trip.
        ("owd_forward_median", "ms", 1e3, "s", 1e6, "owamp"),
        ("owd_backward_median", "ms", 1e3, "s", 1e6, "owamp"),
        // The probes above the transport.
        ("http_total", "ms", 1e3, "s", 1e6, "http"),
        ("cert_days_left", "", 1.0, "", 1.0, "tls"),
    ];
    let got: Vec<_> = CheckMetric::all()
        .map(|m| (m.name, m.unit, m.scale, m.uom, m.uom_scale, m.kind.name()))
        .collect();
    assert_eq!(got, want);
    for m in CheckMetric::all() {
        let s = catalogue::series(m.name).expect("a catalogue figure");
        assert!(
            s.served,
            "check reads {} from the series, which must serve it",
            m.name
        );
        assert_eq!(s.quantity, m.quantity);
    }
}

#[test]
fn alert_families_watch_served_figures_that_check_takes() {
    for f in Family::ALL {
        let unit = f.unit();
        assert!(catalogue::series(unit.name).is_some(), "{f:?}'s unit");
        for &d in f.directions() {
            let name = f
                .archive_metric(d)
                .unwrap_or_else(|| panic!("{f:?} has no figure {d:?}"));
            let s = catalogue::series(name).unwrap_or_else(|| panic!("{name} is not in the catalogue"));
            assert!(s.served && s.check_kind.is_some(), "{name}");
            assert_eq!(s.quantity, unit.quantity, "{f:?} {d:?}");
        }
    }
}

#[test]
fn each_figure_is_declared_once_with_sane_bounds() {
    for (i, s) in SERIES.iter().enumerate() {
        assert!(
            SERIES[i + 1..]
                .iter()
                .all(|t| t.name != s.name && t.column != s.column),
            "{} twice",
            s.name
        );
        assert!(s.max > 0.0 && s.max.is_finite(), "{}", s.name);
        if let Some(e) = s.exported {
            assert!(e.name.starts_with("goodput_") && e.per > 0.0, "{}", e.name);
        }
    }
    for kind in kinds() {
        let figures = catalogue::assertion_figures(kind);
        assert!(figures.len() > 3, "{kind} has figures of its own");
        for (i, f) in figures.iter().enumerate() {
            assert!(
                figures[i + 1..].iter().all(|g| g.name != f.name),
                "{kind}: {} twice",
                f.name
            );
        }
        // The assertion module reads the same list.
        let names: Vec<&str> = goodput_core::assertion::figures(kind)
            .iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, figures.iter().map(|f| f.name).collect::<Vec<_>>());
    }
    assert!(catalogue::assertion_figures(Kind::Server)
        .iter()
        .all(|f| f.quantity == Quantity::Count));
}

#[test]
fn the_assert_help_names_every_figure_of_its_kind() {
    for kind in kinds() {
        let help = catalogue::assert_help(kind);
        for f in catalogue::assertion_figures(kind) {
            assert!(
                help.split([' ', ',', ';', '(']).any(|w| w == f.name),
                "{kind}'s help lacks {}: {help}",
                f.name
            );
        }
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_source_outside_the_catalogue_spells_a_figures_name() {
    // The names no ordinary word could be: a series' name with its parts
    // joined, every archive column that carries a unit, and every
    // OpenMetrics family `/metrics` exports.
    let names: Vec<&str> = SERIES
        .iter()
        .flat_map(|s| [Some(s.name), Some(s.column), s.exported.map(|e| e.name)])
        .flatten()
        .filter(|n| n.contains('_'))
        .collect();
    assert!(names.contains(&"delay_p95") && names.contains(&"throughput_up_bps"));
    assert!(names.contains(&"goodput_loss_ratio"));
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for c in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = c.path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found the workspace's sources");
    let mut found = Vec::new();
    for f in files {
        let shown = f.strip_prefix(&crates).unwrap_or(&f).display().to_string();
        // The catalogue itself, and the archive's migrations: history as
        // it was run, never edited.
        if shown.ends_with("goodput-core/src/catalogue.rs")
            || shown.ends_with("goodput-archive/src/migrations.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // A module's tests may name figures as input.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            for name in &names {
                if line.contains(&format!("\"{name}\"")) {
                    found.push(format!("{shown}:{}: \"{name}\"", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "figure names spelled outside the catalogue:\n{}",
        found.join("\n")
    );
}

#[test]
fn metrics_exports_the_families_it_always_has() {
    // The agent's `/metrics` latest-value families, as it has named them.
    let want = [
        (
            "goodput_throughput_up_bits_per_second",
            "bits_per_second",
            1.0,
            "throughput_up_bps",
        ),
        (
            "goodput_throughput_down_bits_per_second",
            "bits_per_second",
            1.0,
            "throughput_down_bps",
        ),
        ("goodput_loss_ratio", "ratio", 100.0, "loss_pct"),
        ("goodput_delay_median_seconds", "seconds", 1e6, "delay_median_us"),
        ("goodput_delay_p95_seconds", "seconds", 1e6, "delay_p95_us"),
        ("goodput_jitter_seconds", "seconds", 1e6, "jitter_us"),
        ("goodput_retransmits", "", 1.0, "retransmits"),
        ("goodput_errors", "", 1.0, "errors"),
        ("goodput_hops", "", 1.0, "hops"),
        (
            "goodput_owd_forward_median_seconds",
            "seconds",
            1e6,
            "owd_forward_median_us",
        ),
        (
            "goodput_owd_backward_median_seconds",
            "seconds",
            1e6,
            "owd_backward_median_us",
        ),
        ("goodput_http_total_seconds", "seconds", 1e6, "http_total_us"),
        ("goodput_cert_days_left", "", 1.0, "cert_days_left"),
    ];
    let got: Vec<_> = SERIES
        .iter()
        .filter_map(|s| s.exported.map(|e| (e.name, e.unit, e.per, s.column)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn the_assert_helps_examples_are_valid_for_their_kind() {
    for kind in kinds() {
        let help = catalogue::assert_help(kind);
        let listed = help
            .split_once("e.g. ")
            .and_then(|(_, rest)| rest.split_once(". Any"))
            .map(|(examples, _)| examples)
            .unwrap_or_else(|| panic!("{kind}: no examples in {help}"));
        let examples: Vec<&str> = listed.split(", ").map(|e| e.trim_matches('\'')).collect();
        assert!(examples.len() >= 2, "{kind}: {help}");
        for e in examples {
            let a: goodput_core::assertion::Assertion = e.parse().unwrap();
            goodput_core::assertion::check(kind, &[a])
                .unwrap_or_else(|err| panic!("{kind}'s example '{e}' is refused: {err}"));
        }
    }
}
