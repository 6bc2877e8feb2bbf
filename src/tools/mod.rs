//! bcc's classic tools (execsnoop, opensnoop, biolatency, tcpconnect...) as recipes in rprof's own probe
//! language: each is a short text definition (`defs/NAME.tool`) of the `rprof probe` arguments it runs, bcc's
//! columns as a `--trace-format`, bcc's flags as changes to those arguments, and what this kernel cannot give.
//! Nothing here runs a probe: [`Tool::recipe`] turns a tool's flags into `rprof probe` arguments, which the
//! command line runs (and prints, for `--recipe`) like any others.
mod bcc;
mod def;
mod flags;
pub mod memleak;
pub mod runqslower;
pub mod stacks;

pub use bcc::{Fallback, MultiRecipe, MultiTool};
pub use def::{Block, FlagDef, Tool};
pub use flags::Recipe;

/// Errors in a tool's definition or in the flags given to it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolError {
    #[error("no tool named '{name}'; `rprof tool --list` lists them")]
    Unknown { name: String },
    #[error("tool definition {tool}, line {line}: {reason}")]
    Definition {
        tool: String,
        line: usize,
        reason: String,
    },
    #[error("{tool}: {reason}; `rprof tool {tool} --help` lists its flags")]
    Flag { tool: String, reason: String },
    #[error("{tool} is not available yet: {reason}")]
    Todo { tool: String, reason: String },
}

/// The definitions, in `--list` order (bcc's tools page's, roughly by how often they are used).
const DEFS: &[&str] = &[
    include_str!("defs/execsnoop.tool"),
    include_str!("defs/opensnoop.tool"),
    include_str!("defs/statsnoop.tool"),
    include_str!("defs/killsnoop.tool"),
    include_str!("defs/syscount.tool"),
    include_str!("defs/biolatency.tool"),
    include_str!("defs/biosnoop.tool"),
    include_str!("defs/runqlat.tool"),
    include_str!("defs/tcpconnect.tool"),
    include_str!("defs/tcpaccept.tool"),
    include_str!("defs/tcplife.tool"),
    include_str!("defs/tcpretrans.tool"),
    include_str!("defs/gethostlatency.tool"),
    include_str!("defs/bashreadline.tool"),
    include_str!("defs/cachestat.tool"),
    include_str!("defs/ext4slower.tool"),
    include_str!("defs/oomkill.tool"),
];

/// Every tool, parsed (a definition that does not parse is a bug, caught by the tests: it is left out).
pub fn all() -> Vec<Tool> {
    DEFS.iter().filter_map(|d| Tool::parse(d).ok()).collect()
}

/// The tool named `name`.
pub fn find(name: &str) -> Result<Tool, ToolError> {
    all()
        .into_iter()
        .find(|t| t.name == name)
        .ok_or_else(|| ToolError::Unknown {
            name: name.to_string(),
        })
}

/// `words` as one line a POSIX shell reads back as the same words: each word that needs it in single quotes.
pub fn shell_line(words: &[String]) -> String {
    let quote = |w: &String| {
        let plain = !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:,=@%+".contains(c));
        match plain {
            true => w.clone(),
            false => format!("'{}'", w.replace('\'', r"'\''")),
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The tools that are programs of their own rather than recipes (name, what it shows): faces over `record`
/// (profile, offcputime), a bpftrace program (runqslower), and memleak's table of allocations.
pub const PROGRAMS: &[(&str, &str)] = &[
    (
        "profile",
        "sampled CPU stacks with counts (bcc's profile), over rprof record",
    ),
    (
        "offcputime",
        "blocked time by stack in microseconds (bcc's offcputime), over record --off-cpu",
    ),
    (
        "runqslower",
        "run queue waits longer than a threshold, one line each (bcc's runqslower)",
    ),
    (
        "memleak",
        "stacks with outstanding allocations of a process, every 5 s (bcc's memleak)",
    ),
];

/// bcc's multi-tools (funccount, funclatency, stackcount, trace, argdist), which take bcc's own arguments.
pub fn multi(name: &str) -> Option<&'static MultiTool> {
    bcc::find(name)
}

/// Every multi-tool, in `--list` order.
pub fn multis() -> &'static [MultiTool] {
    bcc::all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that every definition parses, and names are unique.
    #[test]
    fn every_definition_parses() {
        for d in DEFS {
            if let Err(e) = Tool::parse(d) {
                panic!("{e}");
            }
        }
        let mut names: Vec<String> = all().into_iter().map(|t| t.name).collect();
        assert_eq!(names.len(), DEFS.len());
        names.dedup();
        assert_eq!(names.len(), DEFS.len());
    }

    /// Check quoting for the shell.
    #[test]
    fn quoting() {
        let w = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(shell_line(&w(&["probe", "-d", "5"])), "probe -d 5");
        assert_eq!(
            shell_line(&w(&["a b", "it's", "{x}"])),
            r"'a b' 'it'\''s' '{x}'"
        );
    }
}
