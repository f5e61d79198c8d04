//! Pass/fail assertions over a result's figures: `goodput >= 900Mbit`,
//! `loss < 0.1%`, `rtt.p99 < 5ms`, `errors == 0`.
//!
//! The grammar, one comparison per assertion:
//!
//! ```text
//! assertion = figure op value
//! figure    = a name from the kind's list (see [`figures`])
//! op        = "<" | "<=" | ">" | ">=" | "==" | "!="
//! value     = number unit      (the unit the figure's quantity takes:
//!                               a rate 900Mbit, 1.5Gbit/s, 100MB/s;
//!                               a share 0.1%; a time 5ms, 250us, 2s;
//!                               bytes 1GiB, 10MB; a count takes none)
//! ```
//!
//! Spaces around the operator are optional. A figure that names no figure
//! of the test's kind, or a value without the unit its figure needs, is an
//! error before the test starts.

use serde::{Deserialize, Serialize};

pub use crate::catalogue::{assertion_figures as figures, Figure, Quantity};
use crate::kind::Kind;
use crate::result::TestResult;
use crate::spec::SpecError;
use crate::units::{ByteRate, ByteSize};

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Op {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Eq => a == b,
            Op::Ne => a != b,
        }
    }
}

/// One assertion as written, split into its parts (the value not yet read:
/// its unit depends on the figure).
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    /// The text as written.
    pub text: String,
    /// The figure's name.
    pub figure: String,
    /// The comparison.
    pub op: Op,
    /// The value as written, with its unit.
    pub value: String,
}

impl std::str::FromStr for Assertion {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let at = t
            .find(['<', '>', '=', '!'])
            .ok_or_else(|| format!("'{t}' has no comparison (one of < <= > >= == !=)"))?;
        let (figure, rest) = t.split_at(at);
        let (op, value) = [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .iter()
        .find_map(|(s, op)| rest.strip_prefix(s).map(|v| (*op, v.trim())))
        .ok_or_else(|| format!("'{t}': unknown comparison (one of < <= > >= == !=)"))?;
        let figure = figure.trim();
        if figure.is_empty()
            || !figure
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
        {
            return Err(format!("'{t}': the figure's name is missing or malformed"));
        }
        if value.is_empty() {
            return Err(format!("'{t}': the value is missing"));
        }
        Ok(Self {
            text: t.to_owned(),
            figure: figure.to_owned(),
            op,
            value: value.to_owned(),
        })
    }
}

impl std::fmt::Display for Assertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Assertion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Assertion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Assertion {
    fn schema_name() -> String {
        "Assertion".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            metadata: Some(Box::new(schemars::schema::Metadata {
                description: Some(
                    "a figure, a comparison and a value with its unit, such as \"goodput >= 900Mbit\", \
                     \"loss < 0.1%\", \"rtt.p99 < 5ms\" or \"errors == 0\""
                        .into(),
                ),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into()
    }
}

/// How one assertion came out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AssertionOutcome {
    /// The assertion as written.
    pub expression: String,
    /// The figure's value in this result, in its base unit (bits/s,
    /// percent, seconds, bytes, or a count); absent when the run did not
    /// measure it (the assertion then fails).
    pub measured: Option<f64>,
    /// The same, in words with its unit.
    pub measured_text: String,
    /// Whether it held.
    pub passed: bool,
}

/// Reads a value as written for `quantity`, in the quantity's base unit;
/// the unit is required (none for a count).
pub(crate) fn value_of(text: &str, quantity: Quantity) -> Result<f64, String> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(text.len());
    let (number, unit) = (text[..number_end].trim(), text[number_end..].trim());
    let need = || format!("'{text}' needs {}", quantity.name());
    match quantity {
        Quantity::Count => match unit.is_empty() {
            true => number.parse::<f64>().map_err(|_| need()),
            false => Err(need()),
        },
        Quantity::Share => match unit {
            "%" => number.parse::<f64>().map_err(|_| need()),
            _ => Err(need()),
        },
        Quantity::Time => {
            let scale = match unit {
                "ns" => 1e-9,
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                _ => return Err(need()),
            };
            number.parse::<f64>().map(|n| n * scale).map_err(|_| need())
        }
        Quantity::Rate => {
            if unit.is_empty() {
                return Err(need());
            }
            let unit = unit.strip_suffix("/s").map_or(unit.to_owned(), |u| {
                // "Mbit/s" reads as "Mbit"; "MB/s" as "MB/s".
                if u.ends_with("bit") {
                    u.to_owned()
                } else {
                    format!("{u}/s")
                }
            });
            format!("{number}{unit}")
                .parse::<ByteRate>()
                .map(|r| r.0 as f64 * 8.0)
                .map_err(|_| need())
        }
        Quantity::Bytes => {
            if unit.is_empty() {
                return Err(need());
            }
            format!("{number}{unit}")
                .parse::<ByteSize>()
                .map(|b| b.0 as f64)
                .map_err(|_| need())
        }
    }
}

/// Checks assertions against a kind's figures and units before a test
/// starts (field `assert`).
pub fn check(kind: Kind, assertions: &[Assertion]) -> Result<(), SpecError> {
    for a in assertions {
        figure_of(kind, a)?;
    }
    Ok(())
}

fn figure_of(kind: Kind, a: &Assertion) -> Result<(&'static Figure, f64), SpecError> {
    let all = figures(kind);
    let Some(f) = all.iter().find(|f| f.name == a.figure) else {
        let names: Vec<&str> = all.iter().map(|f| f.name).collect();
        return Err(SpecError::new(
            "assert",
            format!(
                "'{a}': unknown figure '{}'; the {kind} kind's figures are {}",
                a.figure,
                names.join(", ")
            ),
        ));
    };
    let v = value_of(&a.value, f.quantity).map_err(|e| SpecError::new("assert", format!("'{a}': {e}")))?;
    Ok((f, v))
}

/// Evaluates checked assertions against a result of `kind`.
pub fn evaluate(kind: Kind, assertions: &[Assertion], result: &TestResult) -> Vec<AssertionOutcome> {
    assertions
        .iter()
        .map(|a| match figure_of(kind, a) {
            Ok((f, want)) => {
                let measured = f.read(result);
                AssertionOutcome {
                    expression: a.text.clone(),
                    measured,
                    measured_text: measured.map_or_else(|| "not measured".into(), |v| f.quantity.show(v)),
                    passed: measured.is_some_and(|v| a.op.holds(v, want)),
                }
            }
            Err(e) => AssertionOutcome {
                expression: a.text.clone(),
                measured: None,
                measured_text: e.message,
                passed: false,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(t: &str) -> Assertion {
        t.parse().unwrap()
    }

    #[test]
    fn the_grammar_reads_each_comparison_with_or_without_spaces() {
        for (text, figure, op, value) in [
            ("goodput >= 900Mbit", "goodput", Op::Ge, "900Mbit"),
            ("loss<0.1%", "loss", Op::Lt, "0.1%"),
            ("rtt.p99 <= 5ms", "rtt.p99", Op::Le, "5ms"),
            ("errors == 0", "errors", Op::Eq, "0"),
            ("aborted != 0", "aborted", Op::Ne, "0"),
            ("sent > 1GiB", "sent", Op::Gt, "1GiB"),
        ] {
            let x = a(text);
            assert_eq!((x.figure.as_str(), x.op, x.value.as_str()), (figure, op, value));
        }
        for bad in [
            "goodput",
            "goodput >= ",
            ">= 5",
            "good put >= 5Mbit",
            "loss => 1%",
        ] {
            assert!(bad.parse::<Assertion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn values_need_their_figures_unit() {
        assert_eq!(value_of("900Mbit", Quantity::Rate), Ok(900e6));
        assert_eq!(value_of("1.5Gbit/s", Quantity::Rate), Ok(1.5e9));
        assert_eq!(value_of("100MB/s", Quantity::Rate), Ok(800e6));
        assert_eq!(value_of("0.1%", Quantity::Share), Ok(0.1));
        assert_eq!(value_of("250us", Quantity::Time), Ok(250e-6));
        assert_eq!(value_of("5ms", Quantity::Time), Ok(5e-3));
        assert_eq!(value_of("1GiB", Quantity::Bytes), Ok(1073741824.0));
        assert_eq!(value_of("3", Quantity::Count), Ok(3.0));
        for (v, q) in [
            ("900", Quantity::Rate),
            ("0.1", Quantity::Share),
            ("5", Quantity::Time),
            ("5 parsecs", Quantity::Time),
            ("3%", Quantity::Count),
        ] {
            assert!(value_of(v, q).unwrap_err().contains("needs"), "{v}");
        }
    }

    #[test]
    fn an_unknown_figure_lists_the_kinds_figures() {
        let e = check(Kind::Tcp, &[a("gooput >= 1Gbit")]).unwrap_err();
        assert_eq!(e.field, "assert");
        assert!(e.message.contains("unknown figure 'gooput'"), "{}", e.message);
        assert!(e.message.contains("goodput, goodput.up"), "{}", e.message);
        let e = check(Kind::Stamp, &[a("rtt.p99 < 5")]).unwrap_err();
        assert!(e.message.contains("needs a time"), "{}", e.message);
        assert!(check(Kind::Tcp, &[a("loss < 1%")]).is_err(), "tcp has no loss");
        for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::Server) {
            assert!(check(kind, &[a("errors == 0")]).is_ok());
        }
    }
}
