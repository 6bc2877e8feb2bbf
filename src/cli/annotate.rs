//! `rprof annotate` arguments and their mapping onto the annotate library.
use super::debuginfod::DebuginfodArgs;
use super::output::Stdout;
use clap::Args;
use rprof::annotate::{self, AnnotateOptions, SourcePrefix};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Show which source lines and instructions of the hottest functions (or the named ones) take their time,
/// in perf annotate's layout: each line's (and with --asm each instruction's) share of the function's samples.
#[derive(Args, Debug)]
#[command(
    args_override_self = true,
    after_help = "Examples:\n  rprof annotate\n  rprof annotate -i perf.data --asm divide_loop\n  \
                  rprof annotate 'rprof::report::*' --dso rprof\n  \
                  rprof annotate --source-prefix /build/src=$HOME/src hot_function"
)]
pub struct AnnotateArgs {
    /// The recording to read.
    #[arg(short = 'i', long = "input", default_value = "rprof.data")]
    pub input: PathBuf,
    /// Functions to annotate: exact, demangled or glob names (`'ns::*'`). Default: the hottest few.
    #[arg(value_name = "SYMBOL")]
    pub symbols: Vec<String>,
    /// A function to annotate (perf's spelling of SYMBOL); repeatable.
    #[arg(short = 's', long = "symbol", value_name = "SYMBOL")]
    pub symbol: Vec<String>,
    /// Only functions of this binary (its path or file name), to choose among duplicates.
    #[arg(
        short = 'd',
        long = "dso",
        visible_alias = "dsos",
        value_name = "BINARY"
    )]
    pub dso: Option<String>,
    /// Interleave the disassembly (AT&T syntax, as objdump), with each instruction's share.
    #[arg(long = "asm")]
    pub asm: bool,
    /// Print to standard output as text (the only mode; accepted for perf's spelling).
    #[arg(long = "stdio", conflicts_with = "stdio2")]
    pub stdio: bool,
    /// perf's second text layout: the disassembly (as --asm) with branch targets labelled by their offset in
    /// the function and branches drawn (`↓ jmp 44`, `→ call f`, `← ret`).
    #[arg(long = "stdio2")]
    pub stdio2: bool,
    /// How many of the hottest functions to annotate when none is named.
    #[arg(short = 'n', long = "top", default_value_t = 3)]
    pub top: usize,
    /// Read source files under OLD from NEW instead (the program was built elsewhere); repeatable.
    #[arg(long = "source-prefix", value_name = "OLD=NEW")]
    pub source_prefix: Vec<SourcePrefix>,
    /// Colour the percentages: auto (when standard output is a terminal), always or never.
    #[arg(long = "color", default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
    /// Root of separate debug files (searched by build-id and .gnu_debuglink); repeatable.
    #[arg(long = "debug-dir", default_value = "/usr/lib/debug")]
    pub debug_dir: Vec<PathBuf>,
    #[command(flatten)]
    pub debuginfod: DebuginfodArgs,
}

pub fn run(a: AnnotateArgs) -> anyhow::Result<u8> {
    let (debug, downloads) = a.debuginfod.sources(a.debug_dir.clone(), "annotate")?;
    let opts = AnnotateOptions {
        symbols: a.symbols.into_iter().chain(a.symbol).collect(),
        dso: a.dso,
        top: a.top,
        asm: a.asm || a.stdio2,
        stdio2: a.stdio2,
        source_prefixes: a.source_prefix,
        color: match a.color.as_str() {
            "always" => true,
            "never" => false,
            _ => std::io::stdout().is_terminal(),
        },
        debug,
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, Stdout::lock());
    let salvaged = annotate::annotate(&a.input, &opts, &mut out)?;
    out.flush()?;
    if let Some(downloads) = &downloads {
        downloads.finish();
    }
    if let Some(salvaged) = salvaged {
        salvaged.check()?;
        eprintln!("rprof annotate: warning: {}", salvaged.warning());
    }
    Ok(0)
}
