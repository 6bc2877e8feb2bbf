//! bpftrace's `profile:` and `software:` probes as patterns: a perf software event sampled at a rate or every
//! so many events (the names and default counts are [`crate::perf::software`]'s table).
//!
//! - `profile:hz:N`: `cpu-clock` sampled N times a second (of CPU time: on every CPU, or of the session's tasks);
//!   `profile:s:N`, `profile:ms:N`, `profile:us:N`: a sample every N seconds, milliseconds, microseconds of it.
//! - `software:EVENT[:COUNT]`: a hit every COUNT events (bpftrace's default count for the event without one).
//! - The short forms `p:UNIT:N` and `s:EVENT:COUNT` are taken with all three parts only: `p:NAME` and `s:NAME`
//!   are `LIB:PATTERN` for a library `p` or `s`, as `u:malloc` is for `u`.
use super::pattern::Spec;
use crate::perf::software::{self, Sample};

/// The pattern `kind:rest` as a software event, when `kind` is `profile`, `software` or (with three parts) `p`,
/// `s`; None for other patterns; the error says what was expected.
pub fn parse(kind: &str, rest: &str) -> Option<Result<Spec, String>> {
    let parts = rest.split(':').count();
    Some(match kind {
        "profile" => profile(rest),
        "p" if parts == 2 => profile(rest),
        "software" => event(rest),
        "s" if parts == 2 => event(rest),
        _ => return None,
    })
}

/// `UNIT:N` of a `profile:` probe.
fn profile(rest: &str) -> Result<Spec, String> {
    let usage = "expected profile:hz:N (N samples a second) or profile:s|ms|us:N (one every N units of CPU time), \
                 e.g. profile:hz:99";
    let (unit, n) = rest.split_once(':').ok_or(usage)?;
    let n = count(n).ok_or_else(|| format!("`{n}` is no positive whole number; {usage}"))?;
    let ns_per_unit: u64 = match unit {
        "hz" => {
            return Ok(Spec::Software {
                event: software::cpu_clock(),
                sample: Sample::Freq(n),
                name: format!("profile:hz:{n}"),
            })
        }
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        _ => return Err(format!("`{unit}` is no unit of profile:; {usage}")),
    };
    let period = n
        .checked_mul(ns_per_unit)
        .ok_or_else(|| format!("profile:{unit}:{n} is too long a period"))?;
    Ok(Spec::Software {
        event: software::cpu_clock(),
        sample: Sample::Period(period),
        name: format!("profile:{unit}:{n}"),
    })
}

/// `EVENT[:COUNT]` of a `software:` probe.
fn event(rest: &str) -> Result<Spec, String> {
    let (name, n) = match rest.split_once(':') {
        Some((name, n)) => (name, Some(n)),
        None => (rest, None),
    };
    let event = software::find(name).ok_or_else(|| {
        format!(
            "`{name}` is no software event; expected software:EVENT[:COUNT] with EVENT one of {}",
            software::names()
        )
    })?;
    let period = match n {
        None => event.default_period,
        Some(n) => count(n).ok_or_else(|| {
            format!(
                "`{n}` is no positive whole number: software:{name}:COUNT makes a hit every COUNT events"
            )
        })?,
    };
    Ok(Spec::Software {
        event,
        sample: Sample::Period(period),
        name: format!("software:{}:{period}", event.name),
    })
}

/// A positive whole number.
fn count(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::super::pattern::parse_spec;
    use super::*;

    fn sw(text: &str) -> (&'static str, Sample, String) {
        match parse_spec(text, false).unwrap() {
            Spec::Software {
                event,
                sample,
                name,
            } => (event.name, sample, name),
            other => panic!("{text}: {other:?}"),
        }
    }

    /// Check that `profile:` takes a rate and the three periods, long and short forms alike.
    #[test]
    fn profile_rates_and_periods() {
        let hz = ("cpu-clock", Sample::Freq(99), "profile:hz:99".to_string());
        assert_eq!(sw("profile:hz:99"), hz);
        assert_eq!(sw("p:hz:99"), hz);
        assert_eq!(sw("profile:s:2").1, Sample::Period(2_000_000_000));
        assert_eq!(sw("profile:ms:10").1, Sample::Period(10_000_000));
        assert_eq!(sw("p:us:250").1, Sample::Period(250_000));
        for bad in [
            "profile:hz",
            "profile:hz:0",
            "profile:min:1",
            "profile:hz:x",
            "profile:s:99999999999999",
        ] {
            let e = parse_spec(bad, false).unwrap_err().to_string();
            assert!(e.contains("profile:"), "{bad}: {e}");
        }
    }

    /// Check that `software:` takes perf's names and aliases with bpftrace's default counts, and that the short
    /// `s:`/`p:` are a library's functions unless all three parts are there.
    #[test]
    fn software_names_counts_and_short_forms() {
        let faults = (
            "page-faults",
            Sample::Period(100),
            "software:page-faults:100".into(),
        );
        assert_eq!(sw("software:page-faults"), faults);
        assert_eq!(sw("software:faults"), faults);
        assert_eq!(sw("s:faults:100"), faults);
        assert_eq!(sw("software:cs:1").0, "context-switches");
        assert_eq!(sw("software:migrations:5").1, Sample::Period(5));
        assert_eq!(sw("software:major-faults").1, Sample::Period(1));
        let lib = |l: &str, p: &str| Spec::User {
            library: Some(l.into()),
            pattern: p.into(),
        };
        assert_eq!(parse_spec("s:faults", false).unwrap(), lib("s", "faults"));
        assert_eq!(parse_spec("p:main", false).unwrap(), lib("p", "main"));
        let e = parse_spec("software:cycles", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no software event") && e.contains("page-faults (faults)"),
            "{e}"
        );
        let e = parse_spec("software:faults:0", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("positive"), "{e}");
    }
}
