//! rprof's own cache of what debuginfod servers sent (the elfutils cache layout is not a stable API):
//! `ROOT/<build-id>/debuginfo`, `ROOT/<build-id>/executable`, `ROOT/<build-id>/source/<path>`. A download is
//! written to a temporary file in the same directory and renamed into place only when whole, so a killed
//! run leaves no half file under a final name. A server's "not found" is remembered for a while
//! (`<name>.none`), so that runs in a row do not ask again.
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a "not found" answer is trusted (elfutils' `cache_miss_s`).
const MISS_KEPT: Duration = Duration::from_secs(600);

/// What is fetched for a build id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    Debuginfo,
    Executable,
    /// A source file, by its absolute path as DWARF names it.
    Source(&'a str),
}

impl Kind<'_> {
    /// The path under `/buildid/<hex>/` (for a source: the path as given, its leading `/` kept).
    pub fn url_path(&self) -> String {
        match self {
            Kind::Debuginfo => "debuginfo".into(),
            Kind::Executable => "executable".into(),
            Kind::Source(path) => {
                let escaped = percent_encoding::utf8_percent_encode(path, URL_PATH).to_string();
                format!("source{}", if path.starts_with('/') { "" } else { "/" }) + &escaped
            }
        }
    }

    /// What it is called in messages.
    pub fn what(&self) -> &'static str {
        match self {
            Kind::Debuginfo => "debug file",
            Kind::Executable => "executable",
            Kind::Source(_) => "source file",
        }
    }
}

/// The bytes escaped in a source path: all but letters, digits, `/` and `-._~`.
const URL_PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The cache directory.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    pub fn new(root: PathBuf) -> Cache {
        Cache { root }
    }

    /// Where the file of `kind` for `hex` is kept; None for a source path that would leave the cache (`..`).
    pub fn path(&self, hex: &str, kind: Kind<'_>) -> Option<PathBuf> {
        let dir = self.root.join(hex);
        Some(match kind {
            Kind::Debuginfo => dir.join("debuginfo"),
            Kind::Executable => dir.join("executable"),
            Kind::Source(path) => {
                let relative = Path::new(path.trim_start_matches('/'));
                if relative
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_)))
                {
                    return None;
                }
                dir.join("source").join(relative)
            }
        })
    }

    /// The file, when it is in the cache.
    pub fn get(&self, path: &Path) -> Option<PathBuf> {
        path.is_file().then(|| path.to_path_buf())
    }

    /// Whether the servers said lately that they have no such file.
    pub fn known_missing(&self, path: &Path) -> bool {
        std::fs::metadata(miss_marker(path))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < MISS_KEPT)
    }

    /// Remember that no server has the file.
    pub fn mark_missing(&self, path: &Path) {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::write(miss_marker(path), b"");
        }
    }

    /// A temporary file next to `path`, to download into; [`Download::keep`] renames it into place.
    pub fn download(&self, path: &Path) -> std::io::Result<Download> {
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir)?;
        Ok(Download {
            file: tempfile::NamedTempFile::new_in(dir)?,
            path: path.to_path_buf(),
        })
    }
}

/// The marker of a file no server had.
fn miss_marker(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".none");
    path.with_file_name(name)
}

/// A download in progress: removed unless kept.
pub struct Download {
    file: tempfile::NamedTempFile,
    path: PathBuf,
}

impl Download {
    pub fn writer(&mut self) -> &mut std::fs::File {
        self.file.as_file_mut()
    }

    /// The bytes written so far, as a file to check before keeping it.
    pub fn temp_path(&self) -> &Path {
        self.file.path()
    }

    /// Put the whole download in place (an atomic rename) and return its path.
    pub fn keep(mut self) -> std::io::Result<PathBuf> {
        self.file.as_file_mut().flush()?;
        self.file.as_file().sync_all()?;
        self.file.persist(&self.path).map_err(|e| e.error)?;
        Ok(self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the cache layout, that a source path cannot leave the cache, and how paths go into URLs.
    #[test]
    fn layout_and_urls() {
        let cache = Cache::new(PathBuf::from("/c"));
        assert_eq!(
            cache.path("ab12", Kind::Debuginfo).unwrap(),
            Path::new("/c/ab12/debuginfo")
        );
        assert_eq!(
            cache.path("ab12", Kind::Source("/src/a b.c")).unwrap(),
            Path::new("/c/ab12/source/src/a b.c")
        );
        assert_eq!(cache.path("ab12", Kind::Source("/src/../../etc/x")), None);
        assert_eq!(
            Kind::Source("/src/a b+c.c").url_path(),
            "source/src/a%20b%2Bc.c"
        );
        assert_eq!(Kind::Executable.url_path(), "executable");
    }

    /// Check that a download appears under its name only when kept, and that a dropped one leaves nothing.
    #[test]
    fn downloads_are_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_path_buf());
        let path = cache.path("ab", Kind::Executable).unwrap();
        let mut dropped = cache.download(&path).unwrap();
        dropped.writer().write_all(b"half").unwrap();
        drop(dropped);
        assert_eq!(cache.get(&path), None);
        assert_eq!(std::fs::read_dir(dir.path().join("ab")).unwrap().count(), 0);
        let mut whole = cache.download(&path).unwrap();
        whole.writer().write_all(b"whole").unwrap();
        assert_eq!(whole.keep().unwrap(), path);
        assert_eq!(std::fs::read(cache.get(&path).unwrap()).unwrap(), b"whole");
        assert!(!cache.known_missing(&path));
        cache.mark_missing(&path);
        assert!(cache.known_missing(&path));
    }
}
