//! Durations, byte sizes and HTTP status lists as the flags and the file write them: each type
//! parses its text (clap through `FromStr`, the file through serde, see the `text` module), and
//! prints back text that parses to the same value (for durations and sizes the shortest), which
//! is what `config check` shows.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use orderly_handlers::http::StatusSet;

use super::text::text_serde;

/// A duration: `30s`, `100ms`, `5m` (or `5min`), `1h`, `250us`, fractions such as `1.5s`; a bare
/// number is seconds. Printed as whole seconds, else milliseconds, else microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

/// A duration, or `off` (also `none`, `0`) for none at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DurationOrOff(pub Option<Duration>);

/// A size in bytes: `16MiB`, `512KiB`, `1GiB`, `1000000` (`K`/`KB`, `M`/`MB`, `G`/`GB` are binary
/// too). Printed in the largest of MiB and KiB that holds it whole, else in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteSize(pub usize);

/// HTTP statuses, codes and ranges: `408,425,429,500-599`; `none` (or an empty text) for none.
/// Printed as [`StatusSet`] prints them: codes and ranges in the order given, `none` when empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statuses(pub StatusSet);

const DURATION_EXPECTED: &str = "a duration such as 500ms, 30s, 5m";
const SIZE_EXPECTED: &str = "a size such as 16MiB or 1048576";

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("expected {DURATION_EXPECTED}"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => return Err(format!("unknown unit {u:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| "too large for a duration".to_owned())
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("expected {SIZE_EXPECTED}"))?;
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1 << 10,
        "MiB" | "M" | "MB" => 1 << 20,
        "GiB" | "G" | "GB" => 1 << 30,
        u => return Err(format!("unknown unit {u:?} (use KiB, MiB or GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| "too large".to_owned())
}

fn is_off(s: &str) -> bool {
    matches!(s.trim(), "off" | "none" | "0")
}

impl FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_duration(s).map(Self)
    }
}

impl FromStr for DurationOrOff {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if is_off(s) {
            Ok(Self(None))
        } else {
            parse_duration(s).map(|d| Self(Some(d)))
        }
    }
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(Self)
    }
}

impl FromStr for Statuses {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(Self)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let nanos = d.subsec_nanos();
        if nanos == 0 {
            write!(f, "{}s", d.as_secs())
        } else if nanos % 1_000_000 == 0 {
            write!(f, "{}ms", d.as_millis())
        } else if nanos % 1_000 == 0 {
            write!(f, "{}us", d.as_micros())
        } else {
            // Finer than the units the parser knows: seconds with nine decimals parse back
            // to the same nanosecond.
            let frac = format!("{nanos:09}");
            write!(f, "{}.{}s", d.as_secs(), frac.trim_end_matches('0'))
        }
    }
}

impl fmt::Display for DurationOrOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("off"),
            Some(d) => HumanDuration(d).fmt(f),
        }
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b == 0 {
            f.write_str("0")
        } else if b % (1 << 20) == 0 {
            write!(f, "{}MiB", b >> 20)
        } else if b % (1 << 10) == 0 {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b}")
        }
    }
}

impl fmt::Display for Statuses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Duration> for HumanDuration {
    fn from(d: Duration) -> Self {
        Self(d)
    }
}

impl From<Option<Duration>> for DurationOrOff {
    fn from(d: Option<Duration>) -> Self {
        Self(d)
    }
}

impl From<usize> for ByteSize {
    fn from(b: usize) -> Self {
        Self(b)
    }
}

text_serde!(HumanDuration, DURATION_EXPECTED);
text_serde!(DurationOrOff, "`off` or a duration such as 500ms, 30s, 5m");
text_serde!(ByteSize, SIZE_EXPECTED);
text_serde!(Statuses, "HTTP statuses such as 429,500-599, or none");

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    fn d(s: &str) -> Result<Duration, String> {
        s.parse::<HumanDuration>().map(|d| d.0)
    }

    #[test]
    fn durations_parse_as_documented() {
        assert_eq!(d("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(d("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(d("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(d("5min").unwrap(), Duration::from_secs(300));
        assert_eq!(d("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(d("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(d("2").unwrap(), Duration::from_secs(2));
        assert_eq!(d(" 1.5s ").unwrap(), Duration::from_millis(1500));
        assert_eq!(d("0.3s").unwrap(), Duration::from_millis(300));
        let e = d("soon").unwrap_err();
        assert!(e.contains("expected a duration"), "{e}");
        let e = d("5d").unwrap_err();
        assert!(e.contains("unknown unit \"d\""), "{e}");
        let e = d("99999999999999999999999h").unwrap_err();
        assert!(e.contains("too large"), "{e}");
        assert!(d("1e400").is_err());
        assert!(d("-1s").is_err());
    }

    #[test]
    fn off_or_a_duration() {
        for off in ["off", "none", "0", " off "] {
            assert_eq!(off.parse::<DurationOrOff>().unwrap().0, None, "{off}");
        }
        assert_eq!(
            "0s".parse::<DurationOrOff>().unwrap().0,
            Some(Duration::ZERO)
        );
        assert_eq!(
            "5m".parse::<DurationOrOff>().unwrap().0,
            Some(Duration::from_secs(300))
        );
        assert!("never".parse::<DurationOrOff>().is_err());
    }

    #[test]
    fn sizes_parse_as_documented() {
        let b = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(b("16MiB").unwrap(), 16 << 20);
        assert_eq!(b("16MB").unwrap(), 16 << 20);
        assert_eq!(b("512KiB").unwrap(), 512 << 10);
        assert_eq!(b("1GiB").unwrap(), 1 << 30);
        assert_eq!(b("1000").unwrap(), 1000);
        assert!(b("16XB").unwrap_err().contains("unknown unit \"XB\""));
        assert!(b("1.5MiB").is_err());
        assert!(b("99999999999999999999GiB").is_err());
        assert!(
            b(&format!("{}GiB", usize::MAX))
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn printing_is_the_shortest_exact_text() {
        let show = |d: Duration| HumanDuration(d).to_string();
        assert_eq!(show(Duration::from_secs(300)), "300s");
        assert_eq!(show(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show(Duration::from_micros(250)), "250us");
        assert_eq!(show(Duration::ZERO), "0s");
        assert_eq!(show(Duration::from_nanos(1_000_000_500)), "1.0000005s");
        assert_eq!(DurationOrOff(None).to_string(), "off");
        assert_eq!(ByteSize(16 << 20).to_string(), "16MiB");
        assert_eq!(ByteSize(4 << 10).to_string(), "4KiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(ByteSize(0).to_string(), "0");
    }

    /// What is printed parses back to the same value, so the flags laid over the file (both
    /// printed as TOML and read again) keep every value exactly.
    #[test]
    fn printed_text_parses_back_to_the_same_value() {
        for nanos in [
            0,
            1,
            999,
            1_000,
            250_000,
            1_000_000,
            1_500_000_000,
            300_000_000_000,
            1_000_000_500,
            86_400_000_000_001,
        ] {
            let v = HumanDuration(Duration::from_nanos(nanos));
            assert_eq!(v.to_string().parse::<HumanDuration>().unwrap(), v, "{v}");
            let o = DurationOrOff(Some(v.0));
            assert_eq!(o.to_string().parse::<DurationOrOff>().unwrap(), o, "{o}");
        }
        for bytes in [0, 1, 1000, 1024, 4096, 16 << 20, (16 << 20) + 1, 3 << 30] {
            let v = ByteSize(bytes);
            assert_eq!(v.to_string().parse::<ByteSize>().unwrap(), v, "{v}");
        }
    }

    #[test]
    fn the_file_reads_text_and_names_what_it_expected() {
        #[derive(Deserialize, Serialize)]
        struct F {
            d: HumanDuration,
            o: DurationOrOff,
            b: ByteSize,
        }
        let f: F = toml::from_str("d = \"1.5s\"\no = \"off\"\nb = \"64KiB\"\n").unwrap();
        assert_eq!(f.d.0, Duration::from_millis(1500));
        assert_eq!(f.o.0, None);
        assert_eq!(f.b.0, 64 << 10);
        assert_eq!(
            toml::to_string(&f).unwrap(),
            "d = \"1500ms\"\no = \"off\"\nb = \"64KiB\"\n"
        );
        let e = toml::from_str::<F>("d = \"soon\"\no = \"off\"\nb = \"1\"\n")
            .err()
            .unwrap();
        assert!(
            e.message()
                .contains("invalid value \"soon\": expected a duration"),
            "{e}"
        );
        let e = toml::from_str::<F>("d = 5\no = \"off\"\nb = \"1\"\n")
            .err()
            .unwrap();
        assert!(e.message().contains("expected a duration such as"), "{e}");
    }
}
