//! Source text for annotations: the files DWARF names, read once each, with `--source-prefix OLD=NEW`
//! rewriting the paths of a build made elsewhere, and what is not on disk fetched from debuginfod.
use crate::symbols::debuginfod::Debuginfod;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// `--source-prefix OLD=NEW`: a source path that starts with OLD is read from NEW instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcePrefix {
    pub old: PathBuf,
    pub new: PathBuf,
}

impl FromStr for SourcePrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((old, new)) if !old.is_empty() => Ok(SourcePrefix {
                old: PathBuf::from(old),
                new: PathBuf::from(new),
            }),
            _ => Err(format!(
                "`{s}` is not OLD=NEW (for example /build/src=/home/me/src)"
            )),
        }
    }
}

/// Source files read on first use.
#[derive(Default)]
pub struct SourceFiles {
    prefixes: Vec<SourcePrefix>,
    /// DWARF path -> lines (None: the file could not be read).
    files: HashMap<String, Option<Vec<String>>>,
    /// debuginfod, and the build id of the binary the files are of: asked for files not on disk.
    fetch: Option<(Arc<Debuginfod>, Vec<u8>)>,
}

impl SourceFiles {
    pub fn new(prefixes: Vec<SourcePrefix>) -> SourceFiles {
        SourceFiles {
            prefixes,
            files: HashMap::new(),
            fetch: None,
        }
    }

    /// Files not on disk are asked of `client` (when on), as sources of the binary with `build_id`.
    pub fn fetching(
        mut self,
        client: Option<Arc<Debuginfod>>,
        build_id: Option<Vec<u8>>,
    ) -> SourceFiles {
        self.fetch = client.zip(build_id);
        self
    }

    /// Where a DWARF path is read from: rewritten by the first prefix that matches.
    pub fn path(&self, file: &str) -> PathBuf {
        let path = Path::new(file);
        self.prefixes
            .iter()
            .find_map(|p| path.strip_prefix(&p.old).ok().map(|rest| p.new.join(rest)))
            .unwrap_or_else(|| path.to_path_buf())
    }

    /// Whether the file can be read.
    pub fn exists(&mut self, file: &str) -> bool {
        self.load(file).is_some()
    }

    /// The text of a line (1-based), without its end of line.
    pub fn line(&mut self, file: &str, line: u32) -> Option<&str> {
        let lines = self.load(file)?;
        lines
            .get((line as usize).checked_sub(1)?)
            .map(String::as_str)
    }

    fn load(&mut self, file: &str) -> Option<&Vec<String>> {
        if !self.files.contains_key(file) {
            let fetched = || {
                let (client, build_id) = self.fetch.as_ref()?;
                std::fs::read(client.source(build_id, file)?).ok()
            };
            let bytes = std::fs::read(self.path(file)).ok().or_else(fetched);
            let text = bytes.map(|bytes| {
                String::from_utf8_lossy(&bytes)
                    .lines()
                    .map(|l| l.replace('\t', "    "))
                    .collect()
            });
            self.files.insert(file.to_string(), text);
        }
        self.files.get(file)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that OLD=NEW rewrites paths under OLD only, and that a bad spelling is refused with an example.
    #[test]
    fn prefixes_rewrite_paths() {
        let p: SourcePrefix = "/build/src=/home/me/src".parse().unwrap();
        let files = SourceFiles::new(vec![p]);
        assert_eq!(
            files.path("/build/src/a/b.c"),
            PathBuf::from("/home/me/src/a/b.c")
        );
        assert_eq!(
            files.path("/usr/include/x.h"),
            PathBuf::from("/usr/include/x.h")
        );
        assert!("nothing"
            .parse::<SourcePrefix>()
            .unwrap_err()
            .contains("OLD=NEW"));
    }

    /// Check that lines are read 1-based from the file, and that a missing file has none.
    #[test]
    fn lines_of_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.c");
        std::fs::write(&path, "int a;\n\tint b;\n").unwrap();
        let mut files = SourceFiles::default();
        let name = path.to_str().unwrap();
        assert_eq!(files.line(name, 1), Some("int a;"));
        assert_eq!(files.line(name, 2), Some("    int b;"));
        assert_eq!(files.line(name, 3), None);
        assert!(!files.exists("/nonexistent/y.c"));
    }
}
