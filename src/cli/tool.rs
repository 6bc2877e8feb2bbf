//! `rprof tool`: bcc's classic tools by name, each a recipe of `rprof probe` arguments (see rprof::tools).
use super::probe::ProbeArgs;
use anyhow::Context;
use clap::{Args, Parser};
use rprof::tools::{self, Tool};
use std::io::Write;

/// Run one of bcc's classic tools (execsnoop, opensnoop, biolatency, tcpconnect...) as an rprof probe recipe.
#[derive(Args, Debug)]
#[command(
    disable_help_flag = true,
    after_help = "Examples:\n  rprof tool --list\n  rprof tool execsnoop\n  rprof tool opensnoop -x -n curl\n  \
                  rprof tool biolatency -D 1 10\n  rprof tool tcpconnect -P 80,443 --recipe\n  \
                  rprof tool syscount -L -- ls -R /usr/share/doc\n  rprof tool NAME --help"
)]
pub struct ToolArgs {
    /// Print help (with NAME: the tool's flags, what this kernel cannot give, and its recipe).
    #[arg(short = 'h', long = "help")]
    pub help: bool,
    /// List the tools, one line each.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
    /// Print the `rprof probe` command the tool runs (with its flags), and run nothing.
    #[arg(long, visible_alias = "dry-run")]
    pub recipe: bool,
    /// The tool.
    #[arg(required_unless_present_any = ["list", "help"], value_name = "NAME")]
    pub name: Option<String>,
    /// The tool's flags, bcc's (`-p PID`, `-x`, `[interval [count]]`...; `rprof tool NAME --help` lists them),
    /// and `-- COMMAND` to launch and follow a command.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "FLAGS"
    )]
    pub flags: Vec<String>,
}

/// `rprof probe`'s arguments alone, to parse a recipe with.
#[derive(Parser, Debug)]
#[command(name = "rprof probe")]
struct ProbeLine {
    #[command(flatten)]
    args: ProbeArgs,
}

/// List, describe, print or run a tool; returns the launched command's exit status (0 without one).
pub fn run(args: ToolArgs) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    if args.list {
        write_list(&mut out)?;
        return Ok(0);
    }
    let Some(name) = args.name else {
        use clap::CommandFactory;
        let mut cli = super::Cli::command();
        if let Some(cmd) = cli.find_subcommand_mut("tool") {
            cmd.print_help()?;
        }
        return Ok(0);
    };
    if tools::PROGRAMS.iter().any(|(n, _)| *n == name) {
        return run_program(&name, args.help, args.recipe, with_separator(args.flags));
    }
    if let Some(multi) = tools::multi(&name) {
        return super::tool_multi::run(multi, args.help, args.recipe, with_separator(args.flags));
    }
    let tool = tools::find(&name)?;
    if args.help {
        write_help(&mut out, &tool)?;
        return Ok(0);
    }
    let mut recipe_only = args.recipe;
    let mut flags = Vec::new();
    let mut command = false;
    let words = with_separator(args.flags);
    for f in words {
        match f.as_str() {
            _ if command => flags.push(f),
            "-h" | "--help" => {
                write_help(&mut out, &tool)?;
                return Ok(0);
            }
            "--recipe" | "--dry-run" => recipe_only = true,
            _ => {
                command = f == "--";
                flags.push(f);
            }
        }
    }
    let recipe = tool.recipe(&flags)?;
    let mut line = vec!["probe".to_string()];
    line.extend(recipe.args.iter().cloned());
    if !recipe.command.is_empty() {
        line.push("--".into());
        line.extend(recipe.command.iter().cloned());
    }
    if recipe_only {
        for note in &recipe.notes {
            writeln!(out, "# {} on this kernel: {note}", tool.name)?;
        }
        writeln!(out, "rprof {}", tools::shell_line(&line))?;
        return Ok(0);
    }
    drop(out);
    // `line` is `probe ARGS...`: its first word stands for the program name.
    let parsed = parse_probe_line(line, &tool.name)?;
    for note in &recipe.notes {
        eprintln!("rprof: {} on this kernel: {note}", tool.name);
    }
    super::probe::run(parsed)
}

/// `line` (`probe ARGS...`) as `rprof probe`'s arguments; `tool` names the recipe in the error.
pub(super) fn parse_probe_line(line: Vec<String>, tool: &str) -> anyhow::Result<ProbeArgs> {
    let parsed = ProbeLine::try_parse_from(line)
        .with_context(|| format!("the {tool} recipe is not a valid rprof probe command"))?;
    Ok(parsed.args)
}

/// `--list`: each tool and what it shows; the ones not available yet say so.
fn write_list(out: &mut dyn Write) -> std::io::Result<()> {
    for t in tools::all() {
        let todo = if t.todo.is_some() {
            " (not yet: needs keyed state)"
        } else {
            ""
        };
        writeln!(out, "{:<15} {}{todo}", t.name, t.about)?;
    }
    for (name, about) in tools::PROGRAMS {
        writeln!(out, "{name:<15} {about}")?;
    }
    for t in tools::multis() {
        writeln!(out, "{:<15} {}", t.name, t.about)?;
    }
    Ok(())
}

/// profile, offcputime, runqslower, memleak: help, recipe or run, with bcc's arguments.
fn run_program(name: &str, help: bool, recipe: bool, words: Vec<String>) -> anyhow::Result<u8> {
    let help = help || words.iter().any(|w| w == "-h" || w == "--help");
    let recipe = recipe || words.iter().any(|w| w == "--recipe" || w == "--dry-run");
    let words: Vec<String> = words
        .into_iter()
        .filter(|w| !["--recipe", "--dry-run"].contains(&w.as_str()))
        .collect();
    let stack_tool = super::tool_stacks::find(name);
    if help {
        let about = tools::PROGRAMS
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |p| p.1);
        let usage = match (name, stack_tool) {
            (_, Some(t)) => t.usage(),
            ("runqslower", _) => tools::runqslower::USAGE,
            _ => tools::memleak::USAGE,
        };
        println!("{name}: {about}\n\nUsage: rprof tool {name} [FLAGS]\n\nFlags (bcc's):\n{usage}");
        println!("  --recipe        print what it runs, run nothing\n\nSee docs/tools.md for what differs from bcc.");
        return Ok(0);
    }
    if let Some(t) = stack_tool {
        return super::tool_stacks::run(t, &words, recipe);
    }
    if name == "memleak" {
        return super::tool_memleak::run(&words, recipe);
    }
    run_runqslower(&words, recipe)
}

/// runqslower: its bpftrace program, run by `rprof bt` with the threshold as `$1`.
fn run_runqslower(words: &[String], recipe: bool) -> anyhow::Result<u8> {
    let a = tools::runqslower::RunqslowerArgs::parse(words)?;
    let threads = match (a.pid, a.tid) {
        (Some(pid), _) => rprof::process::threads(pid as i32)
            .with_context(|| format!("runqslower: cannot list the threads of process {pid}"))?
            .into_iter()
            .map(|t| t as u32)
            .collect(),
        (_, Some(tid)) => vec![tid],
        _ => Vec::new(),
    };
    let program = a.program(&threads);
    if recipe {
        println!(
            "# rprof bt -q -e PROGRAM {}, with PROGRAM:\n{program}",
            a.min_us
        );
        return Ok(0);
    }
    super::bt::run(super::bt::BtArgs {
        program: Some(program),
        cmd: None,
        pid: None,
        output: None,
        format: "text".into(),
        unsafe_ok: false,
        quiet: true,
        list: false,
        verbose: false,
        rest: vec![a.min_us.to_string()],
    })
}

/// `rprof tool NAME --help`: what it shows, its flags, what this kernel cannot give, and its recipe.
fn write_help(out: &mut dyn Write, t: &Tool) -> std::io::Result<()> {
    writeln!(out, "{}: {}", t.name, t.about)?;
    writeln!(out, "bcc's columns: {}", t.columns)?;
    if let Some(todo) = &t.todo {
        writeln!(out, "\nNot available yet: {todo}")?;
        return Ok(());
    }
    writeln!(
        out,
        "\nUsage: rprof tool {} [FLAGS] [-- COMMAND]\n\nFlags:",
        t.name
    )?;
    let common = [
        ("-p", "-p PID", "only this process"),
        ("-d", "-d SECONDS", "stop after this many seconds"),
        (
            "-T",
            "-T",
            "a time column (HH:MM:SS, UTC), or a timestamp with each report",
        ),
        (
            "interval",
            "[interval [count]]",
            "a report every interval seconds, count times",
        ),
    ];
    for (key, flag, help) in common {
        if t.common.iter().any(|c| c == key) {
            writeln!(out, "  {flag:<20} {help}")?;
        }
    }
    for f in &t.flags {
        let flag = match &f.value {
            Some(v) => format!("{} {v}", f.flag),
            None => f.flag.clone(),
        };
        writeln!(out, "  {flag:<20} {}", f.help)?;
    }
    writeln!(
        out,
        "  {:<20} print the rprof probe command, run nothing",
        "--recipe"
    )?;
    if let Ok(r) = t.recipe(&[]) {
        if !r.notes.is_empty() {
            writeln!(out, "\nNot on this kernel:")?;
            for n in &r.notes {
                writeln!(out, "  {n}")?;
            }
        }
        let mut line = vec!["probe".to_string()];
        line.extend(r.args);
        writeln!(out, "\nRecipe:\n  rprof {}", tools::shell_line(&line))?;
    }
    Ok(())
}

/// Whether `err` is a usage error of `rprof tool` (an unknown tool, flag or flag value): exit status 2, as
/// clap's usage errors.
pub fn is_usage_error(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        matches!(
            e.downcast_ref::<tools::ToolError>(),
            Some(tools::ToolError::Flag { .. } | tools::ToolError::Unknown { .. })
        )
    })
}

/// FLAGS with the `--` before the command put back: clap keeps a `--` among them after a flag, but takes one
/// right after NAME for itself (`rprof tool killsnoop -- sh -c ...`).
pub(super) fn with_separator(mut flags: Vec<String>) -> Vec<String> {
    let raw: Vec<String> = std::env::args().collect();
    if flags.iter().any(|f| f == "--") {
        return flags;
    }
    if let Some(i) = raw.iter().rposition(|a| a == "--") {
        let n = raw.len() - i - 1;
        if n <= flags.len() && flags[flags.len() - n..] == raw[i + 1..] {
            flags.insert(flags.len() - n, "--".into());
        }
    }
    flags
}
