//! `rprof report` of a recording with several events: a section per event with perf's `# Samples: N of event
//! 'NAME'` lines, or with `--sort event` alone a row per event.
use rprof::report::{self, Filter, Profile, ReportError, TableOptions};
use std::io::Write;

/// An event of the recording that has samples: its name, its attrs, its samples and their periods.
pub struct EventSamples {
    pub name: String,
    pub attrs: Vec<u16>,
    pub samples: u64,
    pub period: u64,
}

/// The events that have samples, by name (attrs of one name together), in the recording's order.
pub fn events_of(p: &Profile) -> Vec<EventSamples> {
    let mut events: Vec<EventSamples> = Vec::new();
    for (&attr, &(samples, period)) in &p.read_by_attr {
        let name = p
            .event_names
            .get(usize::from(attr))
            .cloned()
            .unwrap_or_else(|| "[unknown]".into());
        match events.iter_mut().find(|e| e.name == name) {
            Some(e) => {
                e.attrs.push(attr);
                e.samples += samples;
                e.period = e.period.saturating_add(period);
            }
            None => events.push(EventSamples {
                name,
                attrs: vec![attr],
                samples,
                period,
            }),
        }
    }
    // An on-CPU recording with its off-CPU samples is one profile (one table of both), not two events.
    if events.len() == 2
        && events
            .iter()
            .any(|e| e.name == rprof::recording::OFF_CPU_EVENT)
    {
        events.retain(|e| e.name != rprof::recording::OFF_CPU_EVENT);
    }
    events
}

/// perf's unit for a sample count in its section header: 12345 as `12K` (perf's convert_unit).
fn perf_count(mut n: u64) -> String {
    let mut unit = ' ';
    for u in ['K', 'M', 'G'] {
        if n > 1000 {
            n /= 1000;
            unit = u;
        }
    }
    format!("{n}{unit}")
}

/// A section per event: perf's header lines, then the table of that event's samples (`load` reads the
/// recording again keeping only them).
pub fn write_sections(
    filter: &Filter,
    events: &[EventSamples],
    opts: &TableOptions,
    out: &mut impl Write,
    load: impl Fn(&Filter) -> Result<Profile, ReportError>,
) -> anyhow::Result<()> {
    for (i, event) in events.iter().enumerate() {
        let mut only = filter.clone();
        only.attrs = event.attrs.clone();
        let profile = load(&only)?;
        if i > 0 {
            writeln!(out, "\n")?;
        }
        let samples = profile.samples + profile.off_samples;
        writeln!(
            out,
            "# Samples: {} of event '{}'",
            perf_count(samples),
            event.name
        )?;
        writeln!(
            out,
            "# Event count (approx.): {}",
            profile.period.saturating_add(profile.off_period)
        )?;
        writeln!(out, "#")?;
        report::write_table(&profile, opts, out)?;
    }
    Ok(())
}

/// `--sort event` alone: a row per event with its share of the samples' periods (and its samples).
pub fn write_event_table(
    p: &Profile,
    events: &[EventSamples],
    show_samples: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let total = events.iter().map(|e| e.period).sum::<u64>().max(1) as f64;
    let samples = events.iter().map(|e| e.samples).sum::<u64>();
    writeln!(
        out,
        "# {} samples of {} events ({} in the file)",
        samples,
        events.len(),
        p.read
    )?;
    writeln!(out, "#")?;
    let column = |s: &str| match show_samples {
        true => format!("{s:>12} "),
        false => String::new(),
    };
    writeln!(out, "# Overhead {}Event", column("Samples"))?;
    writeln!(out, "# -------- {}-----", column("-------"))?;
    let mut rows: Vec<&EventSamples> = events.iter().collect();
    rows.sort_by(|a, b| b.period.cmp(&a.period).then(a.name.cmp(&b.name)));
    for e in rows {
        let share = e.period as f64 * 100.0 / total;
        writeln!(
            out,
            "  {share:>7.2}% {}{}",
            column(&e.samples.to_string()),
            e.name
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perf's convert_unit: counts over 1000 in K, over a million in M.
    #[test]
    fn perf_units() {
        assert_eq!(perf_count(378), "378 ");
        assert_eq!(perf_count(1000), "1000 ");
        assert_eq!(perf_count(10_522), "10K");
        assert_eq!(perf_count(2_500_000), "2M");
    }
}
