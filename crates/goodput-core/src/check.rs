//! `goodput check`, a Nagios/Icinga plugin: the archive's metrics as a
//! plugin reports them, threshold ranges in the plugin guidelines' grammar
//! with units, and the four states.
//!
//! A range is `[@][START:][END]`: an alert when the value is outside
//! START..END (START defaults to 0, END to infinity, `~` is minus
//! infinity), or inside it with `@`. `10` alerts above 10 or below 0,
//! `10:` below 10, `~:10` above 10, `@1:5` from 1 to 5. A number takes the
//! metric's unit (`900Mbit`, `5ms`, `1%`), or none, when it is in the unit
//! the plugin prints (Mbit/s, ms, %, a count).

use std::fmt;

use crate::catalogue::{Quantity, Series, SERIES};

/// A plugin's state, its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// 0.
    Ok,
    /// 1.
    Warning,
    /// 2.
    Critical,
    /// 3: no answer, no data, or a bad request.
    Unknown,
}

impl State {
    /// The exit status.
    pub fn code(self) -> u8 {
        match self {
            State::Ok => 0,
            State::Warning => 1,
            State::Critical => 2,
            State::Unknown => 3,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Ok => "OK",
            State::Warning => "WARNING",
            State::Critical => "CRITICAL",
            State::Unknown => "UNKNOWN",
        })
    }
}

/// A metric the agent's archive serves, as the plugin shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckMetric {
    /// The API's name (`/api/v1/series?metric=`).
    pub name: &'static str,
    /// What it measures, which fixes the units its thresholds take.
    pub quantity: Quantity,
    /// The unit printed, and of a threshold without one.
    pub unit: &'static str,
    /// Archive units (bits/s, %, µs, a count) per printed unit.
    pub scale: f64,
    /// Performance data's unit of measurement (Nagios UOM; empty: none).
    pub uom: &'static str,
    /// Archive units per performance-data unit.
    pub uom_scale: f64,
    /// The kind of test whose runs carry it, when none is named.
    pub kind: crate::kind::Kind,
}

impl CheckMetric {
    /// The plugin's view of a series figure of the catalogue, when
    /// `goodput check` takes it.
    pub fn of(s: &'static Series) -> Option<Self> {
        let kind = s.check_kind?;
        // The unit printed, and performance data's, for each quantity.
        let (unit, scale, uom, uom_scale) = match s.quantity {
            Quantity::Rate => ("Mbit/s", 1e6, "", 1.0),
            Quantity::Share => ("%", 1.0, "%", 1.0),
            Quantity::Time => ("ms", 1e3, "s", 1e6),
            Quantity::Count | Quantity::Bytes => ("", 1.0, "", 1.0),
        };
        Some(CheckMetric {
            name: s.name,
            quantity: s.quantity,
            unit,
            scale,
            uom,
            uom_scale,
            kind,
        })
    }

    /// Every metric, in the catalogue's order.
    pub fn all() -> impl Iterator<Item = CheckMetric> {
        SERIES.iter().filter_map(CheckMetric::of)
    }

    /// The metric of an API name.
    pub fn named(name: &str) -> Result<Self, String> {
        CheckMetric::all().find(|m| m.name == name).ok_or_else(|| {
            let names: Vec<&str> = CheckMetric::all().map(|m| m.name).collect();
            format!("no metric '{name}'; the metrics are {}", names.join(", "))
        })
    }

    /// A value in archive units, as printed (`941.200 Mbit/s`, `0.512 ms`).
    pub fn show(&self, v: f64) -> String {
        let x = v / self.scale;
        match self.unit {
            "" => format!("{x}"),
            "%" => format!("{x:.3}%"),
            u => format!("{x:.3} {u}"),
        }
    }

    /// A threshold's number in archive units: with its unit, or bare in the
    /// printed unit.
    fn value(&self, text: &str) -> Result<f64, String> {
        let t = text.trim();
        let v = match t.parse::<f64>() {
            Ok(bare) => bare * self.scale,
            Err(_) => match (crate::assertion::value_of(t, self.quantity)?, self.quantity) {
                // value_of gives seconds; the archive keeps microseconds.
                (base, Quantity::Time) => base * 1e6,
                (base, _) => base,
            },
        };
        if v.is_finite() {
            Ok(v)
        } else {
            Err(format!("'{t}' is not a finite number"))
        }
    }

    /// A value in performance-data units.
    pub fn perf(&self, v: f64) -> f64 {
        v / self.uom_scale
    }
}

/// A threshold range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Lower end, archive units.
    pub start: f64,
    /// Upper end.
    pub end: f64,
    /// `@`: alert inside, not outside.
    pub inside: bool,
}

impl Range {
    /// Reads `[@][START:][END]` with `metric`'s units.
    pub fn parse(text: &str, metric: &CheckMetric) -> Result<Self, String> {
        let t = text.trim();
        let (inside, body) = match t.strip_prefix('@') {
            Some(b) => (true, b),
            None => (false, t),
        };
        let (start, end) = match body.split_once(':') {
            Some((s, e)) => (s, e),
            None => ("", body),
        };
        let start = match start.trim() {
            "" => 0.0,
            "~" => f64::NEG_INFINITY,
            s => metric.value(s).map_err(|e| format!("'{text}': {e}"))?,
        };
        let end = match end.trim() {
            "" if body.contains(':') => f64::INFINITY,
            "" => return Err(format!("'{text}' has no end: write START:END, START: or END")),
            e => metric.value(e).map_err(|e| format!("'{text}': {e}"))?,
        };
        if start > end {
            return Err(format!("'{text}': the start is above the end"));
        }
        Ok(Self { start, end, inside })
    }

    /// Whether `v` raises the alert.
    pub fn alerts(&self, v: f64) -> bool {
        let outside = v < self.start || v > self.end;
        outside != self.inside
    }

    /// As performance data writes it, in `metric`'s UOM.
    pub fn perf(&self, metric: &CheckMetric) -> String {
        let n = |v: f64| match v {
            v if v == f64::NEG_INFINITY => "~".to_owned(),
            v => format!("{}", metric.perf(v)),
        };
        let mut s = String::new();
        if self.inside {
            s.push('@');
        }
        if self.start != 0.0 || self.end.is_infinite() {
            s.push_str(&n(self.start));
            s.push(':');
        }
        if self.end.is_finite() {
            s.push_str(&n(self.end));
        }
        s
    }
}

/// The state of `v`: critical first, then warning.
pub fn state_of(v: f64, warning: Option<&Range>, critical: Option<&Range>) -> State {
    if critical.is_some_and(|r| r.alerts(v)) {
        State::Critical
    } else if warning.is_some_and(|r| r.alerts(v)) {
        State::Warning
    } else {
        State::Ok
    }
}

/// How a window's runs become one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    /// Mean of every run's value.
    Mean,
    /// Smallest.
    Min,
    /// Largest.
    Max,
    /// The newest run's.
    Last,
}

impl Statistic {
    /// Over a series' points (at, count, min, mean, max), oldest first;
    /// none when it has no runs.
    pub fn of(self, points: &[(u64, u64, f64, f64, f64)]) -> Option<f64> {
        let runs = points.iter().fold(0u64, |n, p| n.saturating_add(p.1));
        if runs == 0 {
            return None;
        }
        Some(match self {
            Statistic::Mean => {
                points.iter().map(|p| p.3 * p.1 as f64).sum::<f64>()
                    / points.iter().map(|p| p.1 as f64).sum::<f64>()
            }
            Statistic::Min => points.iter().map(|p| p.2).fold(f64::INFINITY, f64::min),
            Statistic::Max => points.iter().map(|p| p.4).fold(f64::NEG_INFINITY, f64::max),
            Statistic::Last => points.iter().rev().find(|p| p.1 > 0)?.3,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str) -> CheckMetric {
        CheckMetric::named(name).unwrap()
    }

    #[test]
    fn ranges_read_as_the_plugin_guidelines_say() {
        let loss = m("loss");
        let r = |t: &str| Range::parse(t, &loss).unwrap();
        // "10": outside 0..10.
        assert!(r("10").alerts(10.5) && r("10").alerts(-1.0) && !r("10").alerts(10.0));
        // "10:": below 10.
        assert!(r("10:").alerts(9.9) && !r("10:").alerts(1e9));
        // "~:10": above 10.
        assert!(r("~:10").alerts(10.1) && !r("~:10").alerts(-1e9));
        // "10:20" outside, "@10:20" inside.
        assert!(r("10:20").alerts(9.0) && !r("10:20").alerts(15.0));
        assert!(r("@10:20").alerts(15.0) && !r("@10:20").alerts(21.0));
        assert!(Range::parse("5:1", &loss).is_err());
        assert!(Range::parse("", &loss).is_err());
        assert!(Range::parse("x", &loss).is_err());
        assert!(Range::parse("NaN", &loss).is_err());
        assert!(Range::parse("inf:", &loss).is_err());
    }

    #[test]
    fn thresholds_take_units_or_the_printed_one() {
        let up = m("throughput_up");
        // Bare: Mbit/s; with a unit: that unit.
        assert_eq!(Range::parse("900:", &up).unwrap().start, 900e6);
        assert_eq!(Range::parse("1Gbit:", &up).unwrap().start, 1e9);
        let d = m("delay_median");
        assert_eq!(Range::parse("5", &d).unwrap().end, 5_000.0);
        assert_eq!(Range::parse("250us", &d).unwrap().end, 250.0);
        assert!(Range::parse("5Mbit", &d).is_err());
        assert_eq!(Range::parse("1%", &m("loss")).unwrap().end, 1.0);
        assert!(CheckMetric::named("latency")
            .unwrap_err()
            .contains("delay_median"));
    }

    #[test]
    fn critical_wins_and_statistics_weigh_runs() {
        let loss = m("loss");
        let w = Range::parse("0", &loss).unwrap();
        let c = Range::parse("1", &loss).unwrap();
        assert_eq!(state_of(0.0, Some(&w), Some(&c)), State::Ok);
        assert_eq!(state_of(0.5, Some(&w), Some(&c)), State::Warning);
        assert_eq!(state_of(2.0, Some(&w), Some(&c)), State::Critical);
        assert_eq!(State::Unknown.code(), 3);
        let pts = [(0, 3, 0.0, 1.0, 2.0), (1, 1, 5.0, 5.0, 5.0)];
        assert_eq!(Statistic::Mean.of(&pts), Some(2.0));
        assert_eq!(Statistic::Min.of(&pts), Some(0.0));
        assert_eq!(Statistic::Max.of(&pts), Some(5.0));
        assert_eq!(Statistic::Last.of(&pts), Some(5.0));
        assert_eq!(Statistic::Mean.of(&[]), None);
        assert_eq!(Range::parse("0", &loss).unwrap().perf(&loss), "0");
        assert_eq!(
            Range::parse("900:", &m("throughput_up"))
                .unwrap()
                .perf(&m("throughput_up")),
            "900000000:"
        );
        assert_eq!(
            Range::parse("5", &m("jitter")).unwrap().perf(&m("jitter")),
            "0.005"
        );
    }
}
