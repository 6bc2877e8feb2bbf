//! One cache of what is made from files: each file (by identity, not by path) once.
use std::collections::HashMap;
use std::hash::Hash;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A file's identity on this system: device and inode, with size and modification time, so that a file
/// rewritten in place (a rebuild) is another file. Many processes map one library under one identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    /// The identity of the regular file at `path`; None when there is none.
    pub fn of(path: &Path) -> Option<FileId> {
        let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
        Some(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        })
    }
}

/// A handle on a value of a [`FileCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CacheId(u32);

/// Values made once per key (a file's identity with what is expected of it), kept until [`FileCache::retain`]
/// drops them and reached by a small [`CacheId`] (never reused).
pub(crate) struct FileCache<K, T> {
    ids: HashMap<K, CacheId>,
    /// None: dropped by [`FileCache::retain`].
    values: Vec<Option<T>>,
}

impl<K: Hash + Eq, T> FileCache<K, T> {
    pub fn new() -> FileCache<K, T> {
        FileCache {
            ids: HashMap::new(),
            values: Vec::new(),
        }
    }

    /// The value of `key`, made by `make` the first time.
    pub fn id(&mut self, key: K, make: impl FnOnce() -> T) -> CacheId {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = CacheId(self.values.len() as u32);
        self.values.push(Some(make()));
        self.ids.insert(key, id);
        id
    }

    /// The value of an id that [`FileCache::id`] gave and [`FileCache::retain`] kept (panics otherwise: the
    /// callers drop their ids of what they drop).
    pub fn get(&mut self, id: CacheId) -> &mut T {
        self.values[id.0 as usize]
            .as_mut()
            .expect("a cache id of a value kept")
    }

    /// Whether `key` has a value.
    pub fn has(&self, key: &K) -> bool {
        self.ids.contains_key(key)
    }

    /// Whether the value of `id` is kept.
    pub fn contains(&self, id: CacheId) -> bool {
        self.values.get(id.0 as usize).is_some_and(Option::is_some)
    }

    /// How many values are kept.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every value kept.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.values.iter_mut().flatten()
    }

    /// Keep the values of the ids that `keep` accepts; the others are dropped (their key made again later).
    pub fn retain(&mut self, mut keep: impl FnMut(CacheId) -> bool) {
        let values = &mut self.values;
        self.ids.retain(|_, id| {
            let kept = keep(*id);
            if !kept {
                values[id.0 as usize] = None;
            }
            kept
        });
    }

    /// The index of an id (for tables kept beside the cache).
    pub fn index(id: CacheId) -> usize {
        id.0 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a key is made once, and that a file rewritten in place gets another identity.
    #[test]
    fn made_once_per_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        let first = FileId::of(&path).unwrap();
        let mut cache = FileCache::new();
        let mut made = 0;
        let a = cache.id(first.clone(), || {
            made += 1;
            "a"
        });
        let b = cache.id(first.clone(), || {
            made += 1;
            "b"
        });
        assert_eq!((a, made, *cache.get(b)), (b, 1, "a"));
        std::fs::write(&path, b"longer").unwrap();
        assert_ne!(FileId::of(&path).unwrap(), first);
        assert_eq!(FileId::of(dir.path()), None, "a directory is no binary");
    }
}
