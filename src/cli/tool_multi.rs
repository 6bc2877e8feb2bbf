//! `rprof tool funccount|funclatency|stackcount|trace|argdist`: bcc's multi-tools with bcc's arguments, each
//! translated by rprof::tools into `rprof probe` arguments and run (or printed, for `--recipe`).
use rprof::tools::{self, MultiRecipe, MultiTool};
use std::io::Write;

/// Describe, print or run a multi-tool; returns the launched command's exit status (0 without one).
pub fn run(
    tool: &MultiTool,
    help: bool,
    recipe_only: bool,
    words: Vec<String>,
) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    let mut recipe_only = recipe_only;
    let mut flags = Vec::new();
    let mut command = false;
    for w in words {
        match w.as_str() {
            _ if command => flags.push(w),
            "-h" | "--help" => {
                write_help(&mut out, tool)?;
                return Ok(0);
            }
            "--recipe" | "--dry-run" => recipe_only = true,
            _ => {
                command = w == "--";
                flags.push(w);
            }
        }
    }
    if help {
        write_help(&mut out, tool)?;
        return Ok(0);
    }
    let MultiRecipe { recipe, fallbacks } = tool.recipe(&flags)?;
    let mut line = vec!["probe".to_string()];
    line.extend(recipe.args.iter().cloned());
    if !recipe_only {
        for f in &fallbacks {
            if let Some(i) = line.iter().position(|a| *a == f.pattern) {
                if !probes_here(&f.pattern) {
                    eprintln!(
                        "rprof: {}: {}; probing `{}` instead",
                        tool.name, f.why, f.instead
                    );
                    line[i] = f.instead.clone();
                }
            }
        }
    }
    if !recipe.command.is_empty() {
        line.push("--".into());
        line.extend(recipe.command.iter().cloned());
    }
    if recipe_only {
        for f in &fallbacks {
            writeln!(
                out,
                "# where `{}` finds nothing: `{}`",
                f.pattern, f.instead
            )?;
        }
        writeln!(out, "rprof {}", tools::shell_line(&line))?;
        return Ok(0);
    }
    drop(out);
    let args = super::tool::parse_probe_line(line, tool.name)?;
    super::probe::run(args)
}

/// Whether `rprof probe -l PATTERN` finds something to probe.
fn probes_here(pattern: &str) -> bool {
    let line = ["probe", "-l", pattern].map(String::from).to_vec();
    let Ok(args) = super::tool::parse_probe_line(line, "fallback") else {
        return false;
    };
    let mut sink = Vec::new();
    rprof::probe::run(&args.options(), &mut sink, &mut |_| {}).is_ok()
}

/// `rprof tool NAME --help`: what it shows, its flags, and how it maps onto `rprof probe`.
fn write_help(out: &mut dyn Write, t: &MultiTool) -> std::io::Result<()> {
    writeln!(out, "{}: {}", t.name, t.about)?;
    writeln!(out, "bcc's columns: {}", t.columns)?;
    writeln!(
        out,
        "\nUsage: rprof tool {} [FLAGS] ARGS... [-- COMMAND]\n\nFlags (bcc's):\n  {}",
        t.name, t.usage
    )?;
    writeln!(
        out,
        "  --recipe       print the rprof probe command, run nothing"
    )?;
    writeln!(
        out,
        "\nKernel functions need kprobes (CONFIG_KPROBE_EVENTS); `--recipe` prints what would run. See \
         docs/tools.md for what differs from bcc."
    )
}
