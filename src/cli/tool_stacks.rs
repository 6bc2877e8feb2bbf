//! `rprof tool profile|offcputime`: bcc's stack tools as faces over `rprof record` (cpu-clock samples, or
//! `--off-cpu` waits, with frame-pointer stacks) into a temporary recording, loaded as `rprof report` loads
//! it and printed as bcc prints it (rprof::tools::stacks).
use super::record::RecordArgs;
use anyhow::Context;
use clap::Parser;
use rprof::report::{self, Filter, SampleKinds};
use rprof::symbols::SymbolizerOptions;
use rprof::tools::stacks::{self, StackArgs, StackTool};
use std::io::Write;

/// `rprof record`'s arguments alone, to parse the tool's record line with.
#[derive(Parser, Debug)]
#[command(name = "rprof record")]
struct RecordLine {
    #[command(flatten)]
    args: RecordArgs,
}

/// The tool named `name`, if it is one of these.
pub fn find(name: &str) -> Option<StackTool> {
    match name {
        "profile" => Some(StackTool::Profile),
        "offcputime" => Some(StackTool::OffCpu),
        _ => None,
    }
}

/// Run profile or offcputime with bcc's arguments; returns the launched command's exit status.
pub fn run(tool: StackTool, words: &[String], recipe_only: bool) -> anyhow::Result<u8> {
    let a = StackArgs::parse(tool, words)?;
    let record = a.record_args();
    if recipe_only {
        let mut line = vec!["record".to_string(), "-o".into(), "FILE".into()];
        line.extend(record);
        println!("rprof {}", rprof::tools::shell_line(&line));
        println!(
            "# then the stacks of FILE in bcc's layout (rprof report --folded is the same data)"
        );
        return Ok(0);
    }
    let dir =
        tempfile::tempdir().context("cannot create a temporary directory for the recording")?;
    let file = dir.path().join("rprof.data");
    let mut line = vec![
        "record".to_string(),
        "-N".into(),
        "-o".into(),
        file.display().to_string(),
    ];
    line.extend(record);
    let parsed = RecordLine::try_parse_from(line).with_context(|| {
        format!(
            "the {} recording is not a valid rprof record command",
            tool.name()
        )
    })?;
    if let Some(h) = a.header() {
        println!("{h}");
        std::io::stdout().flush()?;
    }
    let status = super::record::run(parsed.args)?;
    let filter = Filter {
        kinds: match tool {
            StackTool::Profile => SampleKinds::OnCpu,
            StackTool::OffCpu => SampleKinds::OffCpu,
        },
        threads: true,
        ..Filter::default()
    };
    let opts = SymbolizerOptions {
        debug: rprof::symbols::DebugSources::default(),
        inlines: false,
        lines: false,
        demangle: true,
    };
    let profile = report::load(&file, &filter, opts)?;
    let found = stacks::bcc_stacks(&profile, &a);
    let mut out = std::io::stdout().lock();
    if !a.folded {
        writeln!(out)?;
    }
    stacks::write_stacks(&mut out, &found, &a)?;
    out.flush()?;
    Ok(status)
}
