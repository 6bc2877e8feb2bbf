//! Reading a tool's definition: `KEY: VALUE` lines, then `flag -X [VALUE]: HELP` blocks (and `when -X -Y:` blocks
//! for flags given together) of indented `KEY: VALUE` lines. See `defs/` and docs/tools.md.
use super::ToolError;

/// What a definition, a flag or a combination of flags sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Probe patterns (`syscall:openat(filename:str) ret`); in a flag, they replace the tool's.
    pub probes: Option<Vec<String>>,
    /// Further `rprof probe` arguments; in a flag, `args:` replaces the tool's and `+args:` adds to them.
    pub args: Option<Vec<String>>,
    pub more_args: Vec<String>,
    /// Filters, joined with `&&` onto every probe (`$VALUE` is the flag's value).
    pub filters: Vec<String>,
    /// The `--trace-format` (bcc's columns).
    pub trace: Option<String>,
    /// What this kernel cannot give, said in the header.
    pub cannot: Vec<String>,
}

/// One of a tool's own flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagDef {
    /// `-x`, `-n`.
    pub flag: String,
    /// The name of its value (`NAME`, `PORT`), if it takes one.
    pub value: Option<String>,
    pub help: String,
    pub block: Block,
}

/// A tool: its name, one line about it, what it runs, and its flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub about: String,
    /// bcc's columns or output, as a reminder in `--list` and `--help`.
    pub columns: String,
    /// Not runnable yet, and why.
    pub todo: Option<String>,
    /// The common flags it takes: `-p`, `-d`, `-T`, and `interval` for bcc's positional `[interval [count]]`.
    pub common: Vec<String>,
    pub base: Block,
    pub flags: Vec<FlagDef>,
    /// Blocks applied when all their flags are given (after the flags' own).
    pub combos: Vec<(Vec<String>, Block)>,
}

/// Where the lines being read go.
enum Target {
    Base,
    Flag(usize),
    Combo(usize),
}

impl Tool {
    /// Parse a definition.
    pub fn parse(text: &str) -> Result<Tool, ToolError> {
        let mut tool = Tool {
            name: String::new(),
            about: String::new(),
            columns: String::new(),
            todo: None,
            common: Vec::new(),
            base: Block::default(),
            flags: Vec::new(),
            combos: Vec::new(),
        };
        let mut target = Target::Base;
        for (i, raw) in text.lines().enumerate() {
            let bad = |reason: String| ToolError::Definition {
                tool: tool.name.clone(),
                line: i + 1,
                reason,
            };
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let indented = raw.starts_with(' ');
            let (key, value) = line
                .split_once(':')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| bad(format!("`{line}` is not `KEY: VALUE`")))?;
            if !indented {
                target = Target::Base;
            }
            if let Some(flag) = key.strip_prefix("flag ") {
                let mut words = flag.split_whitespace();
                let flag = words.next().unwrap_or_default().to_string();
                tool.flags.push(FlagDef {
                    flag,
                    value: words.next().map(str::to_string),
                    help: value.to_string(),
                    block: Block::default(),
                });
                target = Target::Flag(tool.flags.len() - 1);
                continue;
            }
            if let Some(flags) = key.strip_prefix("when ") {
                let flags = flags.split_whitespace().map(str::to_string).collect();
                tool.combos.push((flags, Block::default()));
                target = Target::Combo(tool.combos.len() - 1);
                continue;
            }
            let block = match target {
                Target::Base => match key {
                    "name" => {
                        tool.name = value.to_string();
                        continue;
                    }
                    "about" => {
                        tool.about = value.to_string();
                        continue;
                    }
                    "columns" => {
                        tool.columns = value.to_string();
                        continue;
                    }
                    "todo" => {
                        tool.todo = Some(value.to_string());
                        continue;
                    }
                    "common" => {
                        tool.common = value.split_whitespace().map(str::to_string).collect();
                        continue;
                    }
                    _ => &mut tool.base,
                },
                Target::Flag(f) => &mut tool.flags[f].block,
                Target::Combo(c) => &mut tool.combos[c].1,
            };
            block.set(key, value).map_err(bad)?;
        }
        if tool.name.is_empty() || tool.about.is_empty() {
            return Err(ToolError::Definition {
                tool: tool.name,
                line: 0,
                reason: "a tool needs `name:` and `about:`".into(),
            });
        }
        Ok(tool)
    }

    /// The flag `-X`, if the tool has it.
    pub fn flag(&self, flag: &str) -> Option<&FlagDef> {
        self.flags.iter().find(|f| f.flag == flag)
    }
}

impl Block {
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        // Words as a POSIX shell splits them: a value with spaces in single or double quotes.
        let words = || shlex::split(value).ok_or_else(|| format!("unbalanced quotes in `{value}`"));
        match key {
            // An empty `probe:` in a flag leaves no probe patterns (a `--pair` in `args:` names the events).
            "probe" => {
                let probes = self.probes.get_or_insert_with(Vec::new);
                if !value.is_empty() {
                    probes.push(value.to_string());
                }
            }
            "args" => self.args.get_or_insert_with(Vec::new).extend(words()?),
            "+args" => self.more_args.extend(words()?),
            "filter" => self.filters.push(value.to_string()),
            "trace" => self.trace = Some(value.to_string()),
            "cannot" => self.cannot.push(value.to_string()),
            k => return Err(format!("unknown key `{k}`")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check a definition with a base, a flag with a value and a combination.
    #[test]
    fn parses_blocks() {
        let t = Tool::parse(
            "# c\nname: t\nabout: a tool\ncommon: -p -d\nprobe: syscall:openat(filename:str) ret\n\
             trace: {pid} {filename}\nflag -n NAME: by name\n  filter: comm ~ \"$NAME*\"\n\
             flag -x: failed\n  filter: ret < 0\nwhen -n -x:\n  +args: --count --pair 'a | b, c'\ncannot: PPID\n",
        )
        .unwrap();
        assert_eq!(t.common, ["-p", "-d"]);
        assert_eq!(t.base.probes.as_ref().unwrap().len(), 1);
        assert_eq!(t.flag("-n").unwrap().value.as_deref(), Some("NAME"));
        assert_eq!(t.flag("-x").unwrap().block.filters, ["ret < 0"]);
        assert_eq!(t.combos[0].0, ["-n", "-x"]);
        assert_eq!(t.combos[0].1.more_args, ["--count", "--pair", "a | b, c"]);
        assert_eq!(t.base.cannot, ["PPID"]);
        assert!(Tool::parse("name: t\nabout: x\nbogus: 1\n").is_err());
    }
}
