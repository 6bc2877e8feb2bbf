//! `rprof script` arguments and their mapping onto the report library's streaming printer.
use super::debuginfod::DebuginfodArgs;
use super::output::Stdout;
use clap::Args;
use rprof::report::{self, Fields, ScriptOptions};
use rprof::symbols::SymbolizerOptions;
use std::path::PathBuf;

/// Print every sample of a recording (rprof's or `perf record`'s) as text, in perf script's default layout:
/// a line with the command, thread, time, period and event, then one line per frame (address, symbol+offset,
/// module), and a blank line.
#[derive(Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "Examples:\n  rprof script -i perf.data | inferno-collapse-perf | inferno-flamegraph > out.svg\n  \
                  rprof script -F comm,tid,time,event,ip,sym,dso | stackcollapse-perf.pl\n  \
                  rprof script -F +pid,-period"
)]
pub struct ScriptArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// Fields to print, as perf script's -F: a list of comm,tid,pid,time,cpu,period,event,ip,sym,symoff,dso,
    /// callchain,trace (exactly those; `ip` brings the callchain, as in perf; `trace` is a tracepoint's
    /// fields), or +FIELD/-FIELD to edit the default (comm,tid,cpu,time,period,event,ip,sym,symoff,dso,
    /// callchain,trace; for tracepoint samples perf's comm,tid,cpu,time,event,trace and the frames of a stack).
    #[arg(short = 'F', long = "fields", value_parser = parse_fields, allow_hyphen_values = true)]
    pub fields: Option<Fields>,
    /// Only the samples of these commands (comma-separated), as perf script's -c.
    #[arg(
        short = 'c',
        long = "comms",
        visible_alias = "comm",
        value_delimiter = ','
    )]
    pub comms: Vec<String>,
    /// Do not show inlined functions as frames of their own.
    #[arg(long = "no-inline")]
    pub no_inline: bool,
    /// Root of separate debug files (searched by build-id and .gnu_debuglink); repeatable.
    #[arg(long = "debug-dir", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    #[command(flatten)]
    pub debuginfod: DebuginfodArgs,
}

fn parse_fields(spec: &str) -> Result<Fields, String> {
    Fields::parse(spec)
}

pub fn run(a: ScriptArgs) -> anyhow::Result<u8> {
    let (debug, downloads) = a.debuginfod.sources(a.debug_dir.clone(), "script")?;
    let opts = ScriptOptions {
        fields: a.fields.unwrap_or_default(),
        symbolizer: SymbolizerOptions {
            debug,
            inlines: !a.no_inline,
            lines: false,
            demangle: true,
        },
        comms: a.comms,
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Stdout::lock());
    let summary = report::script(&a.input, &opts, &mut out)?;
    if let Some(downloads) = &downloads {
        downloads.finish();
    }
    if let Some(salvaged) = &summary.salvaged {
        salvaged.check()?;
        eprintln!("rprof script: warning: {}", salvaged.warning());
    }
    Ok(0)
}
