//! Parsing and formatting of the quantities users type: byte sizes, rates,
//! durations and `A..B` ranges.
//!
//! Suffixes follow the usual split: `K`, `M`, `G`, `T` (optionally followed by
//! `B`) are decimal (1000), `KiB`, `MiB`, `GiB`, `TiB` are binary (1024).
//! Rates accept an optional `/s` and are in bytes per second unless the
//! suffix says bits (`bit/s`, `bps`, e.g. `100Mbit`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// An error from parsing a user-supplied quantity; the message names the
/// accepted form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{input}': {reason}")]
pub struct ParseError {
    what: &'static str,
    input: String,
    reason: String,
}

impl ParseError {
    fn new(what: &'static str, input: &str, reason: impl Into<String>) -> Self {
        Self {
            what,
            input: input.to_owned(),
            reason: reason.into(),
        }
    }
}

fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

fn multiplier(suffix: &str) -> Option<u64> {
    let s = suffix.to_ascii_lowercase();
    let m = match s.as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" | "ki" => 1 << 10,
        "mib" | "mi" => 1 << 20,
        "gib" | "gi" => 1 << 30,
        "tib" | "ti" => 1 << 40,
        _ => return None,
    };
    Some(m)
}

fn scaled(what: &'static str, input: &str, number: &str, mult: u64) -> Result<u64, ParseError> {
    let number = number.replace('_', "");
    if number.is_empty() {
        return Err(ParseError::new(what, input, "expected a number first"));
    }
    if let Ok(n) = number.parse::<u64>() {
        return n
            .checked_mul(mult)
            .ok_or_else(|| ParseError::new(what, input, "too large"));
    }
    let f: f64 = number
        .parse()
        .map_err(|_| ParseError::new(what, input, "not a number"))?;
    let v = f * mult as f64;
    if !v.is_finite() || v >= u64::MAX as f64 {
        return Err(ParseError::new(what, input, "too large"));
    }
    if v.fract() != 0.0 {
        return Err(ParseError::new(what, input, "must be a whole number of bytes"));
    }
    Ok(v as u64)
}

/// A number of bytes, e.g. `65536`, `64KiB`, `1GiB`, `1.5MB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let (num, suffix) = split_number(t);
        let mult = multiplier(suffix).ok_or_else(|| {
            ParseError::new(
                "size",
                s,
                "expected a byte count with an optional suffix K, M, G, T (x1000) or KiB, MiB, GiB, TiB (x1024)",
            )
        })?;
        scaled("size", s, num, mult).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_bytes(self.0))
    }
}

/// Formats a byte count exactly when it is a whole number of binary units
/// (`64 KiB`), otherwise as plain bytes (`1000 B`).
pub fn format_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, size) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {}", n / size, name);
        }
    }
    format!("{n} B")
}

/// A size for people to read, in the largest binary unit it reaches:
/// `64 KiB` when that is exact, otherwise two decimals with the exact count
/// after them (`1.12 GiB (1201273260 B)`).
pub fn format_size(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    match UNITS.iter().find(|(_, size)| n >= *size) {
        Some((name, size)) if n.is_multiple_of(*size) => format!("{} {name}", n / size),
        Some((name, size)) => format!("{:.2} {name} ({n} B)", n as f64 / *size as f64),
        None => format!("{n} B"),
    }
}

/// A send rate in bytes per second, e.g. `10MB/s` or `80Mbit` (= 10 MB/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteRate(pub u64);

impl FromStr for ByteRate {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let t = t.strip_suffix("/s").or_else(|| t.strip_suffix("ps")).unwrap_or(t);
        let (num, suffix) = split_number(t);
        let lower = suffix.to_ascii_lowercase();
        let (unit, bits) = if let Some(p) = lower.strip_suffix("bit") {
            (p.to_owned(), true)
        } else {
            (lower.clone(), false)
        };
        let mult = multiplier(&unit).ok_or_else(|| {
            ParseError::new(
                "rate",
                s,
                "expected bytes per second like 10MB/s, 64KiB/s or bits like 100Mbit",
            )
        })?;
        let v = scaled("rate", s, num, mult)?;
        Ok(ByteRate(if bits { v / 8 } else { v }))
    }
}

/// Formats bits per second with a decimal unit: `9.41 Gbit/s`.
pub fn format_bits_per_second(bytes_per_second: f64) -> String {
    let bits = bytes_per_second * 8.0;
    let (v, unit) = if bits >= 1e9 {
        (bits / 1e9, "Gbit/s")
    } else if bits >= 1e6 {
        (bits / 1e6, "Mbit/s")
    } else if bits >= 1e3 {
        (bits / 1e3, "kbit/s")
    } else {
        (bits, "bit/s")
    };
    format!("{v:.2} {unit}")
}

/// A duration such as `500ms`, `5s`, `2m`, `1h`, `250us`; a bare number is seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let (num, suffix) = split_number(t);
        let nanos_per: f64 = match suffix.to_ascii_lowercase().as_str() {
            "" | "s" | "sec" => 1e9,
            "ms" => 1e6,
            "us" | "µs" => 1e3,
            "ns" => 1.0,
            "m" | "min" => 60e9,
            "h" => 3600e9,
            _ => {
                return Err(ParseError::new(
                    "duration",
                    s,
                    "expected a number with a unit ns, us, ms, s, m or h (e.g. 500ms, 30s)",
                ))
            }
        };
        // Whole numbers exactly (a float would round large nanosecond counts).
        if let Ok(n) = num.replace('_', "").parse::<u64>() {
            let nanos = u128::from(n) * nanos_per as u128;
            return u64::try_from(nanos)
                .map(|n| HumanDuration(Duration::from_nanos(n)))
                .map_err(|_| ParseError::new("duration", s, "out of range"));
        }
        let n: f64 = num
            .replace('_', "")
            .parse()
            .map_err(|_| ParseError::new("duration", s, "not a number"))?;
        let nanos = n * nanos_per;
        if !nanos.is_finite() || nanos < 0.0 || nanos > u64::MAX as f64 {
            return Err(ParseError::new("duration", s, "out of range"));
        }
        Ok(HumanDuration(Duration::from_nanos(nanos as u64)))
    }
}

/// A closed range `lo..hi` of values, or a single value; one value is picked
/// per connection with [`ValueRange::pick`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueRange<T> {
    /// Lowest value (inclusive).
    pub lo: T,
    /// Highest value (inclusive).
    pub hi: T,
}

impl<T: Copy + PartialOrd> ValueRange<T> {
    /// A range holding a single value.
    pub fn single(v: T) -> Self {
        Self { lo: v, hi: v }
    }
    /// Whether the range holds a single value.
    pub fn is_single(&self) -> bool {
        self.lo == self.hi
    }
    /// Whether `v` lies inside the range.
    pub fn contains(&self, v: T) -> bool {
        self.lo <= v && v <= self.hi
    }
}

impl<T: Copy + Into<u64> + From<u64> + PartialOrd> ValueRange<T> {
    /// Picks a value uniformly from the range given a uniform random `u64`
    /// supplied by the caller (the core has no random source of its own).
    pub fn pick(&self, random: u64) -> T {
        let lo: u64 = self.lo.into();
        let hi: u64 = self.hi.into();
        let span = hi - lo;
        if span == u64::MAX {
            return T::from(random);
        }
        T::from(lo + random % (span + 1))
    }
}

impl From<u64> for ByteSize {
    fn from(v: u64) -> Self {
        ByteSize(v)
    }
}
impl From<ByteSize> for u64 {
    fn from(v: ByteSize) -> u64 {
        v.0
    }
}
impl From<u64> for ByteRate {
    fn from(v: u64) -> Self {
        ByteRate(v)
    }
}
impl From<ByteRate> for u64 {
    fn from(v: ByteRate) -> u64 {
        v.0
    }
}

impl<T: FromStr<Err = ParseError> + Copy + PartialOrd> FromStr for ValueRange<T> {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once("..") {
            None => Ok(Self::single(s.parse()?)),
            Some((a, b)) => {
                let lo: T = a.parse()?;
                let hi: T = b.trim_start_matches('=').parse()?;
                if hi < lo {
                    return Err(ParseError::new(
                        "range",
                        s,
                        "the upper bound must not be below the lower bound (form: LOW..HIGH)",
                    ));
                }
                Ok(Self { lo, hi })
            }
        }
    }
}

impl<T: fmt::Display + Copy + PartialOrd> fmt::Display for ValueRange<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}..{}", self.lo, self.hi)
        }
    }
}

impl fmt::Display for ByteRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} B/s ({})", self.0, format_bits_per_second(self.0 as f64))
    }
}

/// A port number or a range of ports; `0` means "ephemeral".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port (inclusive).
    pub lo: u16,
    /// Last port (inclusive).
    pub hi: u16,
}

impl PortRange {
    /// Number of ports in the range.
    pub fn len(&self) -> u32 {
        u32::from(self.hi - self.lo) + 1
    }
    /// Whether this is the single port 0 (let the kernel choose).
    pub fn is_ephemeral(&self) -> bool {
        self.lo == 0 && self.hi == 0
    }
    /// Always false: a range holds at least one port.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The port for the `n`-th connection, cycling through the range.
    pub fn nth(&self, n: u64) -> u16 {
        self.lo + (n % u64::from(self.len())) as u16
    }
}

impl FromStr for PortRange {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseError::new("port", s, "expected a port 0-65535 or a range LOW..HIGH");
        let (a, b) = s.split_once("..").unwrap_or((s, s));
        let lo: u16 = a.trim().parse().map_err(|_| bad())?;
        let hi: u16 = b.trim().parse().map_err(|_| bad())?;
        if hi < lo || (lo == 0 && hi != 0) {
            return Err(bad());
        }
        Ok(Self { lo, hi })
    }
}

/// The spelling of a quantity in the flags' grammar that parses back to
/// the same value: the largest unit that divides it exactly (`1GiB`,
/// `25Mbit`, `500ms`, `10..20`). Spec documents are written this way.
pub trait Canonical {
    /// The value in the flags' grammar.
    fn canonical(&self) -> String;
}

impl Canonical for ByteSize {
    fn canonical(&self) -> String {
        // The shortest exact spelling; units win a tie, binary ones first
        // (`1KiB`, `1MB` = 1,000,000, `100GB` rather than `97656250KiB`).
        const UNITS: [(&str, u64); 8] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
            ("TB", 1_000_000_000_000),
            ("GB", 1_000_000_000),
            ("MB", 1_000_000),
            ("KB", 1_000),
        ];
        UNITS
            .iter()
            .filter(|(_, size)| self.0 >= *size && self.0.is_multiple_of(*size))
            .map(|(name, size)| format!("{}{name}", self.0 / size))
            .chain(std::iter::once(self.0.to_string()))
            .min_by_key(String::len)
            .unwrap_or_default()
    }
}

impl Canonical for ByteRate {
    fn canonical(&self) -> String {
        // In bits when a decimal unit of bits divides it (`25Mbit`), else
        // bytes per second.
        let bits = u128::from(self.0) * 8;
        for (name, unit) in [
            ("T", 1_000_000_000_000u128),
            ("G", 1_000_000_000),
            ("M", 1_000_000),
            ("k", 1_000),
        ] {
            // (A bit count past 64 bits would not parse back.)
            if bits >= unit && bits.is_multiple_of(unit) && bits <= u128::from(u64::MAX) {
                return format!("{}{name}bit", bits / unit);
            }
        }
        format!("{}B/s", self.0)
    }
}

impl Canonical for HumanDuration {
    fn canonical(&self) -> String {
        let n = self.0.as_nanos();
        if n == 0 {
            return "0s".to_owned();
        }
        for (name, unit) in [
            ("h", 3_600_000_000_000u128),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
        ] {
            if n >= unit && n.is_multiple_of(unit) {
                return format!("{}{name}", n / unit);
            }
        }
        format!("{n}ns")
    }
}

impl Canonical for PortRange {
    fn canonical(&self) -> String {
        if self.lo == self.hi {
            self.lo.to_string()
        } else {
            format!("{}..{}", self.lo, self.hi)
        }
    }
}

impl<T: Canonical + Copy + PartialOrd> Canonical for ValueRange<T> {
    fn canonical(&self) -> String {
        if self.lo == self.hi {
            self.lo.canonical()
        } else {
            format!("{}..{}", self.lo.canonical(), self.hi.canonical())
        }
    }
}

/// A size as iperf3 reads it: K, M, G, T multiply by 1024 (KiB … also
/// accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Iperf3Size(pub u64);

impl std::str::FromStr for Iperf3Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        let mult: u64 = match suffix.trim() {
            "" => 1,
            "k" | "K" | "KiB" => 1 << 10,
            "m" | "M" | "MiB" => 1 << 20,
            "g" | "G" | "GiB" => 1 << 30,
            "t" | "T" | "TiB" => 1 << 40,
            _ => {
                return Err(format!(
                    "'{s}': expected a number with an optional K, M, G or T (×1024)"
                ))
            }
        };
        let v: f64 = num.parse().map_err(|_| format!("'{s}': not a number"))?;
        let bytes = v * mult as f64;
        if !(0.0..1.8e19).contains(&bytes) {
            return Err(format!("'{s}': out of range"));
        }
        Ok(Iperf3Size(bytes.round() as u64))
    }
}

/// A rate in bits/s as iperf3 reads it: k, m, g, t multiply by 1000
/// (`25M`, also written `25Mbit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BitRate(pub u64);

impl std::str::FromStr for BitRate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.contains('/') && !t.ends_with("bit/s") {
            return Err(format!("'{s}': burst counts (RATE/N) are not supported"));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        let suffix = suffix.trim();
        let suffix = suffix
            .strip_suffix("bit/s")
            .or_else(|| suffix.strip_suffix("bit"))
            .unwrap_or(suffix);
        let mult: f64 = match suffix {
            "" => 1.0,
            "k" | "K" => 1e3,
            "m" | "M" => 1e6,
            "g" | "G" => 1e9,
            "t" | "T" => 1e12,
            _ => {
                return Err(format!(
                    "'{s}': expected bits/s with an optional k, m, g or t (×1000)"
                ))
            }
        };
        let v: f64 = num.parse().map_err(|_| format!("'{s}': not a number"))?;
        let bits = v * mult;
        if !(0.0..1.8e19).contains(&bits) {
            return Err(format!("'{s}': out of range"));
        }
        Ok(BitRate(bits.round() as u64))
    }
}

impl Canonical for BitRate {
    fn canonical(&self) -> String {
        for (name, unit) in [
            ("T", 1_000_000_000_000u64),
            ("G", 1_000_000_000),
            ("M", 1_000_000),
            ("k", 1_000),
        ] {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return format!("{}{name}bit", self.0 / unit);
            }
        }
        format!("{}bit", self.0)
    }
}

impl Canonical for Iperf3Size {
    fn canonical(&self) -> String {
        for (name, unit) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return format!("{}{name}", self.0 / unit);
            }
        }
        self.0.to_string()
    }
}

/// A size (`1GB`, `100MiB`, a number of bytes) or, with a time unit, a
/// duration (`10s`): how much to move, or for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeOrTime {
    /// This many bytes.
    Size(ByteSize),
    /// For this long.
    Time(HumanDuration),
}

impl FromStr for SizeOrTime {
    type Err = String;
    fn from_str(v: &str) -> Result<Self, String> {
        let t = v.trim();
        let timed = ["ns", "us", "ms", "s", "m", "h"].iter().any(|u| {
            t.strip_suffix(u)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
        });
        if timed {
            return t.parse().map(SizeOrTime::Time).map_err(|e| format!("'{v}': {e}"));
        }
        t.parse()
            .map(SizeOrTime::Size)
            .map_err(|e| format!("'{v}': expected a size (1GB, 100MiB) or a duration (10s): {e}"))
    }
}

impl Canonical for SizeOrTime {
    fn canonical(&self) -> String {
        match self {
            SizeOrTime::Size(b) => b.canonical(),
            SizeOrTime::Time(d) => d.canonical(),
        }
    }
}

/// Reads a quantity from a document: a string in the flags' grammar, or a
/// plain non-negative number (bytes, bytes per second, seconds, a port).
struct TextVisitor<T>(std::marker::PhantomData<T>, &'static str);

impl<T: FromStr<Err = E2>, E2: fmt::Display> serde::de::Visitor<'_> for TextVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.1)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(|e: E2| E::custom(e))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_str(&v.to_string())
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<T, E> {
        if v < 0 {
            return Err(E::custom(format!("{v} is negative; expected {}", self.1)));
        }
        self.visit_str(&v.to_string())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<T, E> {
        if v < 0.0 {
            return Err(E::custom(format!("{v} is negative; expected {}", self.1)));
        }
        self.visit_str(&v.to_string())
    }
}

fn text_schema(description: &str) -> schemars::schema::Schema {
    use schemars::schema::{InstanceType, Metadata, SchemaObject, SingleOrVec};
    SchemaObject {
        instance_type: Some(SingleOrVec::Vec(vec![
            InstanceType::String,
            InstanceType::Integer,
        ])),
        metadata: Some(Box::new(Metadata {
            description: Some(description.to_owned()),
            ..Default::default()
        })),
        ..Default::default()
    }
    .into()
}

macro_rules! as_text {
    ($t:ty, $name:literal, $expecting:literal) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.canonical())
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(TextVisitor(std::marker::PhantomData, $expecting))
            }
        }
        impl schemars::JsonSchema for $t {
            fn schema_name() -> String {
                $name.into()
            }
            fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
                text_schema($expecting)
            }
        }
    };
}

as_text!(
    ByteSize,
    "Size",
    "a size such as \"1GiB\", \"64KiB\", \"1.5MB\" or a number of bytes"
);
as_text!(
    ByteRate,
    "Rate",
    "a rate such as \"25Mbit\", \"10MB/s\" or a number of bytes per second"
);
as_text!(
    HumanDuration,
    "Duration",
    "a duration such as \"10s\", \"500ms\", \"2m\" or a number of seconds"
);
as_text!(
    BitRate,
    "BitRate",
    "a rate in bits per second such as \"25Mbit\" or \"25M\" (k, M, G, T multiply by 1000), or a number of bits per second"
);
as_text!(
    Iperf3Size,
    "Iperf3Size",
    "a size as iperf3 reads it: \"128K\", \"1M\" (K, M, G, T multiply by 1024; KiB … also accepted) or a number of bytes"
);
as_text!(
    SizeOrTime,
    "SizeOrTime",
    "a size such as \"1GB\", \"100MiB\" or a number of bytes, or a duration such as \"10s\""
);
as_text!(PortRange, "PortRange", "a port 0-65535 or a range \"LOW..HIGH\"");
as_text!(
    ValueRange<ByteSize>,
    "SizeRange",
    "a size, or a range \"LOW..HIGH\" of sizes such as \"1MiB..4MiB\""
);
as_text!(
    ValueRange<ByteRate>,
    "RateRange",
    "a rate, or a range \"LOW..HIGH\" of rates such as \"1Mbit..10Mbit\""
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_or_a_time_reads_back_as_it_is_written() {
        for (text, want) in [
            ("1MB", SizeOrTime::Size(ByteSize(1_000_000))),
            ("4096", SizeOrTime::Size(ByteSize(4096))),
            ("10s", SizeOrTime::Time(HumanDuration(Duration::from_secs(10)))),
            (
                "1.5s",
                SizeOrTime::Time(HumanDuration(Duration::from_millis(1500))),
            ),
        ] {
            let v: SizeOrTime = text.parse().unwrap();
            assert_eq!(v, want, "{text}");
            assert_eq!(v.canonical().parse::<SizeOrTime>().unwrap(), v, "{text}");
        }
        assert!("lots"
            .parse::<SizeOrTime>()
            .unwrap_err()
            .starts_with("'lots': expected a size (1GB, 100MiB) or a duration (10s)"));
        assert_eq!(
            serde_json::to_string(&SizeOrTime::Time(HumanDuration(Duration::from_millis(1500)))).unwrap(),
            "\"1500ms\""
        );
    }

    #[test]
    fn sizes_parse_with_decimal_and_binary_suffixes() {
        assert_eq!("65536".parse::<ByteSize>().unwrap().0, 65536);
        assert_eq!("64KiB".parse::<ByteSize>().unwrap().0, 65536);
        assert_eq!("64k".parse::<ByteSize>().unwrap().0, 64_000);
        assert_eq!("1GiB".parse::<ByteSize>().unwrap().0, 1 << 30);
        assert_eq!("1.5MB".parse::<ByteSize>().unwrap().0, 1_500_000);
        assert_eq!("2 MiB".parse::<ByteSize>().unwrap().0, 2 << 20);
        assert!("1.5B".parse::<ByteSize>().is_err());
        assert!("12XB".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
        assert!("99999999999TiB".parse::<ByteSize>().is_err());
    }

    #[test]
    fn rates_parse_bytes_and_bits() {
        assert_eq!("10MB/s".parse::<ByteRate>().unwrap().0, 10_000_000);
        assert_eq!("80Mbit".parse::<ByteRate>().unwrap().0, 10_000_000);
        assert_eq!("80Mbit/s".parse::<ByteRate>().unwrap().0, 10_000_000);
        assert_eq!("1000".parse::<ByteRate>().unwrap().0, 1000);
        assert!("fast".parse::<ByteRate>().is_err());
    }

    #[test]
    fn durations_parse_units() {
        assert_eq!(
            "500ms".parse::<HumanDuration>().unwrap().0,
            Duration::from_millis(500)
        );
        assert_eq!("5".parse::<HumanDuration>().unwrap().0, Duration::from_secs(5));
        assert_eq!("2m".parse::<HumanDuration>().unwrap().0, Duration::from_secs(120));
        assert_eq!(
            "1.5s".parse::<HumanDuration>().unwrap().0,
            Duration::from_millis(1500)
        );
        assert!("5 fortnights".parse::<HumanDuration>().is_err());
        assert!("-1s".parse::<HumanDuration>().is_err());
    }

    #[test]
    fn ranges_parse_and_pick_inside() {
        let r: ValueRange<ByteSize> = "1KiB..4KiB".parse().unwrap();
        assert_eq!(r.lo.0, 1024);
        assert_eq!(r.hi.0, 4096);
        for random in [0u64, 1, 3071, 3072, 3073, u64::MAX] {
            let v = r.pick(random);
            assert!(r.contains(v), "{v:?}");
        }
        assert_eq!(r.pick(0).0, 1024);
        assert_eq!(r.pick(3072).0, 4096);
        assert!("4KiB..1KiB".parse::<ValueRange<ByteSize>>().is_err());
        let single: ValueRange<ByteSize> = "7".parse().unwrap();
        assert!(single.is_single());
        assert_eq!(single.pick(12345).0, 7);
    }

    #[test]
    fn port_ranges_cycle() {
        let p: PortRange = "5000..5002".parse().unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!([p.nth(0), p.nth(1), p.nth(2), p.nth(3)], [5000, 5001, 5002, 5000]);
        assert!("0".parse::<PortRange>().unwrap().is_ephemeral());
        assert!("70000".parse::<PortRange>().is_err());
        assert!("0..10".parse::<PortRange>().is_err());
    }

    #[test]
    fn bytes_format_in_binary_units() {
        assert_eq!(format_bytes(65536), "64 KiB");
        assert_eq!(format_bytes(1 << 30), "1 GiB");
        assert_eq!(format_bytes(1000), "1000 B");
        assert_eq!(format_size(1000), "1000 B");
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1_201_273_260), "1.12 GiB (1201273260 B)");
        assert_eq!(format_size(1536), "1.50 KiB (1536 B)");
        assert_eq!(format_size(3_085_512 << 10), "2.94 GiB (3159564288 B)");
        assert_eq!(format_size(u64::MAX), "16777216.00 TiB (18446744073709551615 B)");
        assert_eq!(format_bits_per_second(1.25e9), "10.00 Gbit/s");
    }

    #[test]
    fn bit_rates_and_iperf3_sizes_read_back_as_the_flags_read_them() {
        for (text, bits) in [
            ("25M", 25_000_000),
            ("25Mbit", 25_000_000),
            ("1.5k", 1500),
            ("7", 7),
            ("3Gbit/s", 3_000_000_000),
        ] {
            let r: BitRate = text.parse().unwrap();
            assert_eq!(r.0, bits, "{text}");
            assert_eq!(r.canonical().parse::<BitRate>().unwrap(), r);
        }
        assert_eq!(BitRate(25_000_000).canonical(), "25Mbit");
        assert_eq!(BitRate(7).canonical(), "7bit");
        assert!("25MB".parse::<BitRate>().is_err());
        for (text, bytes) in [
            ("128K", 131_072),
            ("1M", 1 << 20),
            ("1MiB", 1 << 20),
            ("1000", 1000),
        ] {
            let s: Iperf3Size = text.parse().unwrap();
            assert_eq!(s.0, bytes, "{text}");
            assert_eq!(s.canonical().parse::<Iperf3Size>().unwrap(), s);
        }
        assert_eq!(Iperf3Size(131_072).canonical(), "128KiB");
        let json = serde_json::to_string(&BitRate(25_000_000)).unwrap();
        assert_eq!(json, "\"25Mbit\"");
        assert_eq!(serde_json::from_str::<BitRate>("25000000").unwrap().0, 25_000_000);
    }

    #[test]
    fn canonical_spellings_read_back_in_the_flags_grammar() {
        assert_eq!(ByteSize(1 << 30).canonical(), "1GiB");
        assert_eq!(ByteSize(1000).canonical(), "1KB");
        assert_eq!(ByteSize(1_500_000).canonical(), "1500KB");
        assert_eq!(ByteSize(1001).canonical(), "1001");
        assert_eq!(ByteRate(3_125_000).canonical(), "25Mbit");
        assert_eq!(ByteRate(7).canonical(), "7B/s");
        assert_eq!(ByteRate(125).canonical(), "1kbit");
        assert_eq!(HumanDuration(Duration::from_millis(500)).canonical(), "500ms");
        assert_eq!(HumanDuration(Duration::from_secs(7200)).canonical(), "2h");
        assert_eq!(HumanDuration(Duration::ZERO).canonical(), "0s");
        assert_eq!(
            "1MiB..4MiB".parse::<ValueRange<ByteSize>>().unwrap().canonical(),
            "1MiB..4MiB"
        );
        assert_eq!("0".parse::<PortRange>().unwrap().canonical(), "0");
        assert_eq!(
            "5000..5009".parse::<PortRange>().unwrap().canonical(),
            "5000..5009"
        );
    }

    #[test]
    fn documents_take_text_or_plain_numbers_and_refuse_negatives() {
        let size: ByteSize = serde_json::from_str("\"1GiB\"").unwrap();
        assert_eq!(size.0, 1 << 30);
        let size: ByteSize = serde_json::from_str("4096").unwrap();
        assert_eq!(size.0, 4096);
        let d: HumanDuration = serde_json::from_str("2.5").unwrap();
        assert_eq!(d.0, Duration::from_millis(2500));
        let e = serde_json::from_str::<ByteSize>("-5").unwrap_err().to_string();
        assert!(e.contains("-5 is negative"), "{e}");
        let e = serde_json::from_str::<ByteSize>("\"1 parsec\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid size '1 parsec'"), "{e}");
        assert_eq!(serde_json::to_string(&ByteRate(3_125_000)).unwrap(), "\"25Mbit\"");
    }

    proptest::proptest! {
        #[test]
        fn canonical_spellings_round_trip(n in proptest::prelude::any::<u64>(), ns in 0u64..(1 << 62), lo in 1u16.., w in 0u16..100) {
            proptest::prop_assert_eq!(ByteSize(n).canonical().parse::<ByteSize>().unwrap(), ByteSize(n));
            proptest::prop_assert_eq!(ByteRate(n).canonical().parse::<ByteRate>().unwrap(), ByteRate(n));
            let d = HumanDuration(Duration::from_nanos(ns));
            proptest::prop_assert_eq!(d.canonical().parse::<HumanDuration>().unwrap(), d);
            let r = PortRange { lo, hi: lo.saturating_add(w) };
            proptest::prop_assert_eq!(r.canonical().parse::<PortRange>().unwrap(), r);
            let json = serde_json::to_string(&ByteSize(n)).unwrap();
            proptest::prop_assert_eq!(serde_json::from_str::<ByteSize>(&json).unwrap(), ByteSize(n));
        }
    }
}
