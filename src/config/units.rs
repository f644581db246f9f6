//! Duration and size strings as they appear in the config file (`"500ms"`, `"1MiB"`),
//! parsed and printed back. Twenty lines of our own instead of a crate.

use std::time::Duration;

/// Parses `"500ms"`, `"1.5s"`, `"2m30s"`, `"0"`: one or more `<number><unit>` parts with
/// units `ns`, `us`, `ms`, `s`, `m`, `h`, `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let invalid = || {
        format!(
            "invalid duration \"{s}\": write a number and a unit (ns, us, ms, s, m, h, d), e.g. \"500ms\""
        )
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let value: f64 = num.parse().map_err(|_| invalid())?;
        let seconds = match unit.trim() {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(invalid()),
        };
        total += value * seconds;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("duration \"{s}\" is out of range"))
}

/// Prints a duration in the largest unit that keeps it exact, so `check` output parses back.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    for (size, unit) in UNITS {
        if ns.is_multiple_of(size) {
            return format!("{}{unit}", ns / size);
        }
    }
    unreachable!("every duration is a whole number of nanoseconds")
}

/// Parses a byte size: a plain count (`1048576`) or `"64KiB"`, `"1MiB"`, `"10MB"`.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("invalid size \"{s}\": write a byte count or a number and a unit, e.g. \"1MiB\"")
    })?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => {
            return Err(format!(
                "invalid size \"{s}\": units are B, KiB, MiB, GiB, KB, MB, GB"
            ));
        }
    };
    let bytes = (value * scale as f64).round();
    // `as` would saturate silently; a size this large is a mistake worth naming.
    if bytes >= u64::MAX as f64 {
        return Err(format!("size \"{s}\" is out of range"));
    }
    Ok(bytes as u64)
}

/// Prints a byte size in the largest binary unit that keeps it exact.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes != 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m30s"), Ok(Duration::from_secs(150)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn durations_without_units_or_with_unknown_units_are_rejected() {
        assert_eq!(
            parse_duration("500").unwrap_err(),
            "invalid duration \"500\": write a number and a unit (ns, us, ms, s, m, h, d), e.g. \"500ms\""
        );
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn formatted_durations_parse_back_to_the_same_value() {
        for d in [
            Duration::from_millis(500),
            Duration::from_secs(900),
            Duration::from_millis(1500),
            Duration::from_micros(3),
            Duration::ZERO,
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{d:?}");
        }
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn sizes_accept_binary_and_decimal_units_and_plain_counts() {
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert!(parse_size("1 parsec").is_err());
        assert_eq!(
            parse_size("99999999999GiB"),
            Err("size \"99999999999GiB\" is out of range".into())
        );
        assert_eq!(format_size(1 << 20), "1MiB");
        assert_eq!(format_size(1000), "1000B");
    }
}
