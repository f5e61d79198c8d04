//! Times and durations as documents write them: ISO 8601 and goodput's
//! own durations, RFC 3339 UTC times, all as milliseconds. Pure: nothing
//! here reads a clock.

/// An ISO 8601 duration (`PT6H`, `P1DT12H`, `PT90S`, `P2W`) or goodput's
/// own (`6h`, `90s`, `7d`, `2w`), in milliseconds.
pub fn duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    for (suffix, len) in [('d', 86_400_000u64), ('w', 7 * 86_400_000)] {
        if let Some(n) = t.strip_suffix(suffix).and_then(|n| n.trim().parse::<u64>().ok()) {
            return n
                .checked_mul(len)
                .ok_or_else(|| format!("'{t}' is too long a duration"));
        }
    }
    let Some(rest) = t.strip_prefix('P').or_else(|| t.strip_prefix('p')) else {
        return t
            .parse::<crate::units::HumanDuration>()
            .map(|d| d.0.as_millis().min(u128::from(u64::MAX)) as u64)
            .map_err(|_| format!("'{t}' is not a duration: write PT6H, P1D, PT30M or 6h, 30m"));
    };
    let bad = || format!("'{t}' is not an ISO 8601 duration (PnDTnHnMnS or PnW)");
    let (mut total, mut number, mut in_time, mut any) = (0f64, String::new(), false, false);
    for c in rest.chars() {
        match c.to_ascii_uppercase() {
            'T' if number.is_empty() && !in_time => in_time = true,
            d if d.is_ascii_digit() || d == '.' || d == ',' => number.push(if d == ',' { '.' } else { d }),
            unit => {
                let n: f64 = number.parse().map_err(|_| bad())?;
                number.clear();
                any = true;
                total += n * match (unit, in_time) {
                    ('W', false) => 7.0 * 86_400_000.0,
                    ('D', false) => 86_400_000.0,
                    ('H', true) => 3_600_000.0,
                    ('M', true) => 60_000.0,
                    ('S', true) => 1_000.0,
                    _ => return Err(bad()),
                };
            }
        }
    }
    if !number.is_empty() || !any || total > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(total.round() as u64)
}

/// An RFC 3339 UTC time (`2026-12-01T00:00:00Z`, `...+00:00`), in
/// milliseconds since the Unix epoch.
pub fn rfc3339_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("'{text}' is not an RFC 3339 UTC time such as 2026-12-01T00:00:00Z");
    let t = text.trim();
    let t = t
        .strip_suffix('Z')
        .or_else(|| t.strip_suffix("+00:00"))
        .ok_or_else(bad)?;
    let (date, time) = t.split_once(['T', ' ']).ok_or_else(bad)?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let (time, frac) = time.split_once('.').unwrap_or((time, ""));
    let h: Vec<i64> = time
        .split(':')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let (&[y, m, day], &[hh, mm, ss]) = (&d[..], &h[..]) else {
        return Err(bad());
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 || y < 1970 {
        return Err(bad());
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms: i64 = match frac {
        "" => 0,
        f => format!("0.{f}")
            .parse::<f64>()
            .map(|x| (x * 1000.0) as i64)
            .map_err(|_| bad())?,
    };
    Ok((((days * 24 + hh) * 60 + mm) * 60 + ss) as u64 * 1000 + ms as u64)
}

/// Milliseconds since the Unix epoch as an RFC 3339 UTC time with
/// milliseconds (`2026-12-01T00:00:00.000Z`).
pub fn ms_rfc3339(ms: u64) -> String {
    let (y, m, d) = crate::cron::civil((ms / 86_400_000) as i64);
    let rest = ms % 86_400_000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_they_read() {
        for t in [
            "1970-01-01T00:00:00.000Z",
            "2026-02-28T23:59:59.999Z",
            "2028-02-29T12:00:00.500Z",
            "2100-03-01T00:00:00.000Z",
        ] {
            assert_eq!(ms_rfc3339(rfc3339_ms(t).unwrap()), t);
        }
        assert_eq!(ms_rfc3339(1_764_028_800_000), "2025-11-25T00:00:00.000Z");
    }

    #[test]
    fn durations_and_times_read_as_written() {
        assert_eq!(duration_ms("PT6H"), Ok(6 * 3_600_000));
        assert_eq!(duration_ms("P1DT12H"), Ok(36 * 3_600_000));
        assert_eq!(duration_ms("PT1M30S"), Ok(90_000));
        assert_eq!(duration_ms("P2W"), Ok(14 * 86_400_000));
        assert_eq!(duration_ms("PT0.5S"), Ok(500));
        assert_eq!(duration_ms("30m"), Ok(1_800_000));
        for bad in ["P", "PT", "P6H", "PT6D", "P1X", "six"] {
            assert!(duration_ms(bad).is_err(), "{bad}");
        }
        assert_eq!(rfc3339_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(rfc3339_ms("2026-12-01T00:00:00Z"), Ok(1_796_083_200_000));
        assert_eq!(rfc3339_ms("2000-03-01T12:30:15.250+00:00"), Ok(951_913_815_250));
        for bad in ["2026-13-01T00:00:00Z", "2026-12-01T00:00:00", "yesterday"] {
            assert!(rfc3339_ms(bad).is_err(), "{bad}");
        }
    }
}
