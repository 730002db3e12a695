//! Human-readable sizes, times and durations for the CLI renderers.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// "512 B", "1.2 KiB", "3.4 MiB".
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn datetime(ts_us: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ts_us) * 1000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// RFC 3339 in UTC with microseconds, e.g. "2026-11-22T00:39:26.123456Z".
pub fn rfc3339(ts_us: i64) -> String {
    datetime(ts_us)
        .format(&Rfc3339)
        .unwrap_or_else(|_| ts_us.to_string())
}

/// An RFC 3339 time ("2026-11-22T00:39:26Z", any offset) as µs since the
/// epoch; `None` when the text is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1000).ok()
}

/// A bound of a time range as a person gives it: an RFC 3339 time, or a
/// duration back from `now_us` ("2h", "30m", "1d", or bare seconds "90").
/// `None` when the text is neither.
pub fn time_bound(text: &str, now_us: i64) -> Option<i64> {
    if let Some(ts) = parse_rfc3339(text) {
        return Some(ts);
    }
    let t = text.trim();
    let back = match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 => {
            std::time::Duration::try_from_secs_f64(secs).ok()?
        }
        Ok(_) => return None,
        Err(_) => humantime::parse_duration(t).ok()?,
    };
    let back = i64::try_from(back.as_micros()).unwrap_or(i64::MAX);
    Some(now_us.saturating_sub(back))
}

/// "2026-11-22 00:39:26" (UTC), for tables.
pub fn short_time(ts_us: i64) -> String {
    let d = datetime(ts_us);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        d.year(),
        u8::from(d.month()),
        d.day(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

/// "HH:MM:SS.mmm" (UTC), for timeline lines.
pub fn clock(ts_us: i64) -> String {
    let d = datetime(ts_us);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        d.hour(),
        d.minute(),
        d.second(),
        d.millisecond()
    )
}

/// "+0.123s" relative to the session start.
pub fn relative(delta_us: i64) -> String {
    format!("+{:.3}s", delta_us as f64 / 1_000_000.0)
}

/// "850ms", "12.3s", "4m05s", "2h03m".
pub fn duration(us: i64) -> String {
    let us = us.max(0);
    let ms = us / 1000;
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_a_human_wrote_them() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1229), "1.2 KiB");
        assert_eq!(size(5 * 1024 * 1024), "5.0 MiB");
    }

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(rfc3339(1_000_000), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339(1_500_000), "1970-01-01T00:00:01.5Z");
        assert_eq!(relative(123_456), "+0.123s");
        assert_eq!(duration(65_000_000), "1m05s");
    }

    #[test]
    fn rfc3339_times_read_back_in_any_offset() {
        let ts = 1_795_581_474_574_756;
        assert_eq!(parse_rfc3339(&rfc3339(ts)), Some(ts));
        assert_eq!(parse_rfc3339("1970-01-01T01:00:01+01:00"), Some(1_000_000));
        assert_eq!(parse_rfc3339("2h"), None);
        assert_eq!(parse_rfc3339("1970-01-01 00:00:01"), None);
    }
}
