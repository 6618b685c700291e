//! Durations and byte sizes as the flags and the file write them.

use std::time::Duration;

use anyhow::{Context, Result, bail};

/// `30s`, `100ms`, `5m`, `1h`, `250us`; a bare number is seconds.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .with_context(|| {
            format!("invalid value {s:?} for {key}: expected a duration such as 500ms, 30s, 5m")
        })?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => bail!("invalid value {s:?} for {key}: unknown unit {u:?} (use ms, s, m or h)"),
    };
    Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("invalid value {s:?} for {key}: too large for a duration"))
}

/// A duration that must be more than zero (a timeout of 0 would fail everything at once).
pub(super) fn parse_positive_duration(key: &str, s: &str) -> Result<Duration> {
    let d = parse_duration(key, s)?;
    anyhow::ensure!(
        !d.is_zero(),
        "invalid value {s:?} for {key}: must be greater than 0"
    );
    Ok(d)
}

/// `off`/`none` or a duration.
pub(super) fn parse_opt_duration(key: &str, s: &str) -> Result<Option<Duration>> {
    if matches!(s.trim(), "off" | "none" | "0") {
        Ok(None)
    } else {
        parse_duration(key, s).map(Some)
    }
}

/// `16MiB`, `512KiB`, `1GiB`, `1000000`.
pub fn parse_bytes(key: &str, s: &str) -> Result<usize> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().with_context(|| {
        format!("invalid value {s:?} for {key}: expected a size such as 16MiB or 1048576")
    })?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1 << 10,
        "MiB" | "M" | "MB" => 1 << 20,
        "GiB" | "G" | "GB" => 1 << 30,
        u => bail!("invalid value {s:?} for {key}: unknown unit {u:?} (use KiB, MiB or GiB)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("invalid value {s:?} for {key}: too large"))
}

/// A duration as the shortest of `Nms`, `Ns`.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

pub(super) fn fmt_bytes(b: usize) -> String {
    if b == 0 {
        "0".into()
    } else if b % (1 << 20) == 0 {
        format!("{}MiB", b >> 20)
    } else if b % (1 << 10) == 0 {
        format!("{}KiB", b >> 10)
    } else {
        b.to_string()
    }
}
