//! ISO 8601 UTC timestamps for task records, from unix seconds.
//!
//! Key design choice: a dozen lines of the civil-from-days algorithm instead
//! of a date library, since the server only ever formats whole UTC seconds.

/// `YYYY-MM-DDTHH:MM:SSZ` for unix seconds.
pub fn iso8601(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let rem = unix_s % 86_400;
    // Days since 1970-01-01 to a proleptic Gregorian date (era = 400 years).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::iso8601;

    #[test]
    fn known_instants() {
        // Reference values from `date -u -d @N +%Y-%m-%dT%H:%M:%SZ`.
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(1_798_675_199), "2026-12-30T23:59:59Z");
        assert_eq!(iso8601(4_107_542_400), "2100-03-01T00:00:00Z");
    }
}
