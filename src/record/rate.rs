//! Sampling frequencies above the kernel's limit: the kernel refuses an event whose frequency is above
//! `kernel.perf_event_max_sample_rate` (EINVAL), and lowers that limit itself when sampling interrupts take
//! too long. As perf does, such a frequency is lowered to the limit, with a warning ([`LoweredRate`]), unless
//! `--strict-freq` asks to refuse ([`super::RecordError::FrequencyAboveLimit`]).
use super::{Rate, RecordConfig, RecordError};

/// Where the kernel's limit is.
pub const MAX_SAMPLE_RATE_PATH: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

/// A sampling frequency that was lowered to the kernel's limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoweredRate {
    /// The option that asked for it (`-F`, `--off-cpu-stack-hz`).
    pub option: &'static str,
    /// Hz asked for.
    pub asked: u64,
    /// `kernel.perf_event_max_sample_rate`: the Hz sampled at.
    pub max: u64,
}

/// The kernel's limit on sampling frequencies, in Hz (None when it cannot be read).
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string(MAX_SAMPLE_RATE_PATH)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `cfg` with its frequencies above `max` lowered to it, and what was lowered; with `strict_freq`, such a
/// frequency is an error instead.
pub(super) fn cap(
    cfg: &RecordConfig,
    max: Option<u64>,
) -> Result<(RecordConfig, Vec<LoweredRate>), RecordError> {
    let mut capped = cfg.clone();
    let mut lowered = Vec::new();
    let Some(max) = max.filter(|&m| m > 0) else {
        return Ok((capped, lowered));
    };
    let mut check = |option: &'static str, hz: &mut u64| {
        if *hz <= max {
            return Ok(());
        }
        let asked = *hz;
        if cfg.strict_freq {
            return Err(RecordError::FrequencyAboveLimit { option, asked, max });
        }
        *hz = max;
        lowered.push(LoweredRate { option, asked, max });
        Ok(())
    };
    if let Rate::Frequency(hz) = &mut capped.rate {
        check("-F", hz)?;
    }
    if let Some(hz) = &mut capped.off_cpu_stack_hz {
        check("--off-cpu-stack-hz", hz)?;
    }
    Ok((capped, lowered))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(hz: u64, strict: bool) -> RecordConfig {
        RecordConfig {
            rate: Rate::Frequency(hz),
            off_cpu_stack_hz: Some(hz),
            strict_freq: strict,
            ..RecordConfig::default()
        }
    }

    /// Check that frequencies above the limit are lowered to it and said, that those at or below it and
    /// periods are kept, and that --strict-freq refuses instead, naming the limit.
    #[test]
    fn frequencies_above_the_limit_are_lowered_or_refused() {
        let (cfg, lowered) = cap(&at(1_000_000, false), Some(100_000)).unwrap();
        assert!(matches!(cfg.rate, Rate::Frequency(100_000)));
        assert_eq!(cfg.off_cpu_stack_hz, Some(100_000));
        let f = LoweredRate {
            option: "-F",
            asked: 1_000_000,
            max: 100_000,
        };
        assert_eq!(lowered[0], f);
        assert_eq!(lowered.len(), 2);
        for (hz, max) in [(100_000, Some(100_000)), (1_000_000, None)] {
            let (cfg, lowered) = cap(&at(hz, true), max).unwrap();
            assert!(matches!(cfg.rate, Rate::Frequency(h) if h == hz) && lowered.is_empty());
        }
        let period = RecordConfig {
            rate: Rate::Period(1),
            ..RecordConfig::default()
        };
        assert!(cap(&period, Some(1000)).unwrap().1.is_empty());
        let err = cap(&at(1_000_000, true), Some(100_000)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("kernel.perf_event_max_sample_rate")
                && msg.contains("100000")
                && msg.contains("sysctl -w kernel.perf_event_max_sample_rate=1000000"),
            "{msg}"
        );
    }
}
