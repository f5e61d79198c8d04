//! Cron schedules: the five time fields of crontab(5) — minute, hour,
//! day of month, month, day of week — read in UTC, with `*`, lists (`,`),
//! ranges (`-`), steps (`/`), month and weekday names, and the `@hourly`,
//! `@daily`, `@weekly`, `@monthly` and `@yearly` shorthands. As in Vixie
//! cron, when both the day of month and the day of week are restricted a
//! day matches either. Times are whole minutes since the Unix epoch.

use std::str::FromStr;

/// A parsed cron expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday 0.
    weekdays: u8,
    days_any: bool,
    weekdays_any: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One field's set of values as a bit mask, and whether it was `*`.
fn field(
    text: &str,
    lo: u32,
    hi: u32,
    names: &[&str],
    name_base: u32,
    what: &str,
) -> Result<(u64, bool), String> {
    let value = |t: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(t)) {
            return Ok(i as u32 + name_base);
        }
        t.parse::<u32>()
            .map_err(|_| format!("{what}: '{t}' is not a number"))
    };
    let mut mask = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let s: u32 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{what}: step '{s}' must be a number above zero"))?;
                (r, s)
            }
            None => (item, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let a = value(range)?;
            // `a/step` runs from a to the end.
            (a, if item.contains('/') { hi } else { a })
        };
        if a < lo || b > hi || a > b {
            return Err(format!("{what}: '{item}' is outside {lo}-{hi}"));
        }
        let mut v = a;
        while v <= b {
            mask |= 1 << v;
            v += step;
        }
    }
    Ok((mask, text == "*"))
}

impl FromStr for Cron {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let text = match s.trim() {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            t => t,
        };
        let f: Vec<&str> = text.split_whitespace().collect();
        let [mi, h, dom, mon, dow] = f[..] else {
            return Err(format!(
                "'{s}' has {} fields; a cron expression has five: minute hour day-of-month month day-of-week",
                f.len()
            ));
        };
        let (minutes, _) = field(mi, 0, 59, &[], 0, "minute")?;
        let (hours, _) = field(h, 0, 23, &[], 0, "hour")?;
        let (days, days_any) = field(dom, 1, 31, &[], 0, "day of month")?;
        let (months, _) = field(mon, 1, 12, &MONTHS, 1, "month")?;
        let (mut weekdays, weekdays_any) = field(dow, 0, 7, &WEEKDAYS, 0, "day of week")?;
        // 7 is Sunday too.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & 0x7f;
        }
        Ok(Cron {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            days_any,
            weekdays_any,
        })
    }
}

/// The civil date (year, month 1–12, day 1–31) of a day since the epoch.
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m as u32, d as u32)
}

impl Cron {
    fn day_matches(&self, day: u64) -> bool {
        let (_, m, d) = civil(day as i64);
        let weekday = (day + 4) % 7; // 1970-01-01 was a Thursday.
        let dom = self.days & (1 << d) != 0;
        let dow = self.weekdays & (1 << weekday) != 0;
        let day_ok = if self.days_any || self.weekdays_any {
            dom && dow
        } else {
            dom || dow
        };
        self.months & (1 << m) != 0 && day_ok
    }

    /// Whether minute `minute` (since the epoch) is one of its times.
    pub fn matches(&self, minute: u64) -> bool {
        let (day, in_day) = (minute / 1440, minute % 1440);
        self.day_matches(day)
            && self.hours & (1 << (in_day / 60)) != 0
            && self.minutes & (1 << (in_day % 60)) != 0
    }

    /// Its first time at or after minute `from`, looking up to 30 years on
    /// (a schedule such as `0 0 30 2 *` never matches: none).
    pub fn next_at_or_after(&self, from: u64) -> Option<u64> {
        let mut day = from / 1440;
        let mut start = from % 1440;
        for _ in 0..(30 * 366) {
            if self.day_matches(day) {
                for h in (start / 60)..24 {
                    if self.hours & (1 << h) == 0 {
                        continue;
                    }
                    let first = if h == start / 60 { start % 60 } else { 0 };
                    if let Some(m) = (first..60).find(|m| self.minutes & (1 << m) != 0) {
                        return Some(day * 1440 + h * 60 + m);
                    }
                }
            }
            day = day.checked_add(1)?;
            start = 0;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minutes since the epoch of a UTC time.
    fn at(t: &str) -> u64 {
        crate::time::rfc3339_ms(t).unwrap() / 60_000
    }

    #[test]
    fn fields_read_as_crontab_does() {
        let c: Cron = "*/15 9-17 * * mon-fri".parse().unwrap();
        // Wednesday 2026-11-25.
        assert!(c.matches(at("2026-11-25T09:00:00Z")));
        assert!(c.matches(at("2026-11-25T17:45:00Z")));
        assert!(!c.matches(at("2026-11-25T09:05:00Z")));
        assert!(!c.matches(at("2026-11-25T18:00:00Z")));
        // Saturday.
        assert!(!c.matches(at("2026-11-28T10:00:00Z")));
        assert_eq!(
            c.next_at_or_after(at("2026-11-27T17:50:00Z")),
            Some(at("2026-11-30T09:00:00Z"))
        );
        // Both day fields restricted: either matches (the 1st, or a Sunday).
        let either: Cron = "0 0 1 * 0".parse().unwrap();
        assert!(either.matches(at("2026-12-01T00:00:00Z")));
        assert!(either.matches(at("2026-11-29T00:00:00Z")));
        assert!(!either.matches(at("2026-11-30T00:00:00Z")));
        // 7 is Sunday; names in any case; shorthands.
        let sunday: Cron = "30 2 * * 7".parse().unwrap();
        assert_eq!(
            sunday.next_at_or_after(at("2026-11-25T00:00:00Z")),
            Some(at("2026-11-29T02:30:00Z"))
        );
        let daily: Cron = "@daily".parse().unwrap();
        assert_eq!(
            daily.next_at_or_after(at("2026-11-25T00:01:00Z")),
            Some(at("2026-11-26T00:00:00Z"))
        );
        let leap: Cron = "0 12 29 FEB *".parse().unwrap();
        assert_eq!(
            leap.next_at_or_after(at("2026-03-01T00:00:00Z")),
            Some(at("2028-02-29T12:00:00Z"))
        );
        let never: Cron = "0 0 30 2 *".parse().unwrap();
        assert_eq!(never.next_at_or_after(0), None);
    }

    #[test]
    fn a_wrong_expression_says_what_is_wrong() {
        for (text, says) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute: '60' is outside 0-59"),
            ("* 24 * * *", "hour: '24' is outside 0-23"),
            ("* * 0 * *", "day of month: '0' is outside 1-31"),
            ("* * * 13 *", "month: '13' is outside 1-12"),
            ("* * * * fun", "day of week: 'fun' is not a number"),
            ("*/0 * * * *", "minute: step '0' must be a number above zero"),
            ("5-1 * * * *", "minute: '5-1' is outside 0-59"),
        ] {
            let e = text.parse::<Cron>().unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
