//! On-disk cache of compiled kernels, shared by every R process of a user.
//!
//! Entries are named by a hash of everything that affects the binary (source, architecture,
//! compiler and engine versions). Writes go to a temporary file renamed into place, so a reader
//! sees either nothing or a complete entry, and concurrent writers of one entry do not conflict.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A 128-bit FNV-1a hash of the parts, as 32 hexadecimal digits; stable across Rust versions,
/// unlike `DefaultHasher`.
pub fn key(parts: &[&[u8]]) -> String {
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for part in parts {
        for &b in part.iter() {
            h ^= b as u128;
            h = h.wrapping_mul(PRIME);
        }
        // Separator, so that ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        fs::read(self.path(key)).ok().filter(|b| !b.is_empty())
    }

    pub fn store(&self, key: &str, bytes: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let unique = format!(
            "{key}.{}.{:?}.tmp",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos()
        );
        let tmp = self.dir.join(unique);
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, self.path(key))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Removes every entry; returns how many files were removed.
    pub fn clear(&self) -> std::io::Result<usize> {
        let mut n = 0;
        let Ok(entries) = fs::read_dir(&self.dir) else { return Ok(0) };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "cubin" || e == "tmp") {
                fs::remove_file(&path)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_separate_parts() {
        assert_eq!(key(&[b"abc"]), key(&[b"abc"]));
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_eq!(key(&[b""]).len(), 32);
    }

    #[test]
    fn store_load_clear() {
        let dir = std::env::temp_dir().join(format!("rkeops-cache-test-{}", std::process::id()));
        let cache = DiskCache::new(&dir);
        assert!(cache.load("k").is_none());
        cache.store("k", b"binary").unwrap();
        assert_eq!(cache.load("k").unwrap(), b"binary");
        cache.store("k", b"other").unwrap();
        assert_eq!(cache.load("k").unwrap(), b"other");
        assert_eq!(cache.clear().unwrap(), 1);
        assert!(cache.load("k").is_none());
        let _ = fs::remove_dir_all(dir);
    }
}
