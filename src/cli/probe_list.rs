//! `rprof probe -F` (the functions that can be probed) and `rprof probe -l` without a pattern (the probe
//! groups that exist now), perf probe's listings in rprof's terms.
use super::output::Stdout;
use super::probe::ProbeArgs;
use std::io::Write;

/// Said where perf users look for persistent probes.
pub const SESSION_ONLY: &str = "rprof's probes live only as long as the rprof probe session that made them: \
     they are removed when it ends (by its supervisor, even after a SIGKILL), so there are none to list or \
     delete; give the probe and the command (or -p PID) to one rprof probe";

pub fn run(a: &ProbeArgs) -> anyhow::Result<u8> {
    let mut out = std::io::BufWriter::new(Stdout::lock());
    if let Some(filter) = &a.funcs {
        let filter = match (filter.as_str(), a.patterns.first()) {
            ("", None) => None,
            ("", Some(p)) => Some(p.as_str()),
            (f, _) => Some(f),
        };
        let debug = rprof::symbols::DebugSources::default();
        for name in rprof::probe::probeable_functions(a.binary.as_deref(), filter, &debug)? {
            writeln!(out, "{name}")?;
        }
        out.flush()?;
        return Ok(0);
    }
    let groups = rprof::probe::groups_now()?;
    let ours: Vec<_> = groups.iter().filter(|g| g.rprof_owner.is_some()).collect();
    for g in &groups {
        let owner = match g.rprof_owner {
            Some((pid, true)) => format!("rprof process {pid}, running"),
            Some((pid, false)) => {
                format!("rprof process {pid}, gone: the next rprof probe removes it")
            }
            None => "not rprof's".to_string(),
        };
        writeln!(out, "{:<24} {:>5} probes  ({owner})", g.name, g.probes)?;
    }
    out.flush()?;
    if ours.is_empty() {
        eprintln!("rprof probe: no rprof probe groups exist now. {SESSION_ONLY}");
    } else {
        eprintln!("rprof probe: {SESSION_ONLY}");
    }
    Ok(0)
}
