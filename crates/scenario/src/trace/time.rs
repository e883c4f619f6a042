//! A trace's `timestamp` column (docs/clusters.md, "A rate that changes
//! over time"): wall-clock times, as a production log writes them, read
//! to nanoseconds so a trace is replayed with its gaps as they were.
//!
//! Two forms: an ISO 8601 date and time, `2026-12-05T14:03:22.125Z` (a
//! space may stand for the `T`; the zone is `Z`, `+HH:MM`, `-HH:MM` or
//! absent, meaning UTC; years 1970 to 9999), or a time of day,
//! `14:03:22.125` (`HH:MM:SS`, `HH:MM` or with up to nine decimals). Each
//! is read to nanoseconds since a fixed origin (1970-01-01 UTC, or
//! midnight); the run's arrivals are those less the first row's, so the
//! first request arrives at 0. A time of day cannot cross midnight: the
//! times must not decrease, so a trace over several days needs dates.

/// Nanoseconds since the origin of `text`'s form, and whether it had a date.
pub fn parse(text: &str) -> Result<(u64, bool), String> {
    let t = text.trim();
    let bad = || {
        format!(
            "`{}` is not a timestamp: give an ISO 8601 date and time (2026-12-05T14:03:22.125Z) or a time of day \
             (14:03:22.125)",
            llmsim_core::util::short_text(t)
        )
    };
    if t.len() > 64 {
        return Err(bad());
    }
    let (date, rest) = match t.find(['T', 't', ' ']) {
        Some(i) => (Some(&t[..i]), &t[i + 1..]),
        None if t.contains('-') && !t.contains(':') => (Some(t), "00:00:00"),
        None => (None, t),
    };
    // The zone: a trailing `Z` or `+HH:MM` / `-HH:MM` after the time.
    let (clock, offset_s) = match rest.strip_suffix(['Z', 'z']) {
        Some(c) => (c, 0i64),
        None => match rest.rfind(['+', '-']) {
            Some(i) if date.is_some() => (&rest[..i], zone(&rest[i..]).ok_or_else(bad)?),
            _ => (rest, 0),
        },
    };
    let of_day = time_of_day(clock).ok_or_else(bad)?;
    let Some(date) = date else { return Ok((of_day, false)) };
    let days = days_since_epoch(date).ok_or_else(bad)?;
    let secs = days * 86_400 - offset_s;
    if secs < 0 {
        return Err(bad());
    }
    Ok((secs as u64 * 1_000_000_000 + of_day, true))
}

/// `HH:MM[:SS[.fraction]]` in nanoseconds since midnight.
fn time_of_day(text: &str) -> Option<u64> {
    let mut parts = text.split(':');
    let h: u64 = digits(parts.next()?, 1, 2)?;
    let m: u64 = digits(parts.next()?, 2, 2)?;
    let (s, frac) = match parts.next() {
        None => (0, 0),
        Some(sec) => {
            let (whole, frac) = sec.split_once(['.', ',']).unwrap_or((sec, ""));
            if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let f: u64 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
            (digits(whole, 2, 2)?, f * 10u64.pow(9 - frac.len() as u32))
        }
    };
    if parts.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(((h * 60 + m) * 60 + s) * 1_000_000_000 + frac)
}

/// `+HH:MM` / `-HH:MM` (or `+HHMM`) in seconds east of UTC.
fn zone(text: &str) -> Option<i64> {
    let sign = if text.starts_with('-') { -1 } else { 1 };
    let body = &text[1..];
    let (h, m) = match body.split_once(':') {
        Some((h, m)) => (h, m),
        None if body.len() == 4 => body.split_at(2),
        None => (body, "00"),
    };
    let (h, m): (i64, i64) = (digits(h, 2, 2)? as i64, digits(m, 2, 2)? as i64);
    (h <= 23 && m <= 59).then_some(sign * (h * 3600 + m * 60))
}

/// `YYYY-MM-DD` in days since 1970-01-01 (Howard Hinnant's
/// days-from-civil).
fn days_since_epoch(text: &str) -> Option<i64> {
    let mut p = text.split('-');
    let (y, m, d) = (digits(p.next()?, 4, 4)? as i64, digits(p.next()?, 2, 2)? as i64, digits(p.next()?, 2, 2)? as i64);
    if p.next().is_some() || !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 || d > month_days(y, m) {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

fn month_days(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A field of `min..=max` ASCII digits.
fn digits(text: &str, min: usize, max: usize) -> Option<u64> {
    let ok = (min..=max).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::parse;

    const S: u64 = 1_000_000_000;

    #[test]
    fn dates_and_times_read_to_the_nanosecond() {
        // 2026-12-05 is 20,792 days after 1970-01-01 (56 years with 14 leap
        // days to 2026-01-01: 20,454; then 338 days to December 5).
        let day = 20_792 * 86_400 * S;
        assert_eq!(parse("2026-12-05T00:00:00Z"), Ok((day, true)));
        assert_eq!(parse("2026-12-05 14:03:22.125"), Ok((day + (14 * 3600 + 3 * 60 + 22) * S + 125_000_000, true)));
        // An offset is east of UTC: 14:00+02:00 is 12:00 UTC.
        assert_eq!(parse("2026-12-05T14:00:00+02:00"), Ok((day + 12 * 3600 * S, true)));
        assert_eq!(parse("2026-12-05T14:00:00-0130"), Ok((day + (15 * 3600 + 30 * 60) * S, true)));
        assert_eq!(parse("1970-01-01T00:00:00.000000001Z"), Ok((1, true)));
        // Leap years: 2024-02-29 exists, 2026-02-29 does not.
        assert_eq!(parse("2024-03-01").unwrap().0 - parse("2024-02-28").unwrap().0, 2 * 86_400 * S);
        assert!(parse("2026-02-29T00:00:00Z").is_err());
        // Times of day.
        assert_eq!(parse("09:30"), Ok((9 * 3600 * S + 30 * 60 * S, false)));
        assert_eq!(parse(" 23:59:59.999999999 "), Ok((86_400 * S - 1, false)));
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        for bad in
            ["", "soon", "25:00", "12:60", "12:00:00.1234567890", "2026-13-01T00:00:00Z", "1969-12-31", "12:00:00+99"]
        {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("is not a timestamp") && e.contains("ISO 8601"), "{bad}: {e}");
        }
    }
}
