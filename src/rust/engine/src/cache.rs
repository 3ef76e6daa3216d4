//! On-disk cache of compiled kernels, shared by every R process of a user.
//!
//! Entries are named by a hash of everything that affects the binary (source, architecture,
//! compiler and engine versions). Writes go to a temporary file renamed into place, so a reader
//! sees either nothing or a complete entry, and concurrent writers of one entry do not conflict.
//! Each entry starts with a checksum of its binary: a truncated or corrupted entry is removed and
//! compiled again. Binaries are never loaded from a directory that other users can write to.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The first bytes of every entry, then the 32 hexadecimal digits of `key(&[binary])`.
const MAGIC: &[u8] = b"rkeops cache 1\n";
const HEADER: usize = MAGIC.len() + 32;

#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// The cache in `dir`, for removing entries only (`clear`): `open` is for loading binaries.
    pub fn new(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    /// The cache in `dir`, created private to the user (mode 0700) if missing. Refused when other
    /// users can write to `dir`: they could plant a binary that this process would run on its GPU.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DiskCache, String> {
        let dir = dir.into();
        if !dir.exists() {
            create_private_dir(&dir)
                .map_err(|e| format!("cannot create the kernel cache directory {}: {e}", dir.display()))?;
        }
        writable_by_others(&dir)
            .map_err(|e| format!("cannot read the permissions of the kernel cache directory {}: {e}", dir.display()))?
            .map_or(Ok(()), |mode| {
                Err(format!(
                    "the kernel cache directory {} can be written by other users (mode {mode:o}): rkeops does not \
                     load compiled code from it. Make it private (chmod 700) or choose another directory \
                     with the RKEOPS_CACHE_DIR environment variable",
                    dir.display()
                ))
            })?;
        Ok(DiskCache { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    /// The binary stored under `key`, if there is a complete one; a damaged entry is removed.
    pub fn load(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let mut bytes = fs::read(&path).ok()?;
        let intact = bytes.len() > HEADER
            && bytes.starts_with(MAGIC)
            && bytes[MAGIC.len()..HEADER] == *self::key(&[&bytes[HEADER..]]).as_bytes();
        if !intact {
            let _ = fs::remove_file(&path);
            return None;
        }
        Some(bytes.split_off(HEADER))
    }

    pub fn store(&self, key: &str, bytes: &[u8]) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        // Unique to this write: the process, and a counter for the threads of one process.
        static WRITES: AtomicUsize = AtomicUsize::new(0);
        let unique = format!("{key}.{}.{}.tmp", std::process::id(), WRITES.fetch_add(1, Ordering::Relaxed));
        let tmp = self.dir.join(unique);
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(self::key(&[bytes]).as_bytes())?;
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

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)
}

/// The permission bits of `dir` when its group or others may write to it.
#[cfg(unix)]
fn writable_by_others(dir: &Path) -> std::io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir)?.permissions().mode() & 0o7777;
    Ok((mode & 0o022 != 0).then_some(mode))
}

#[cfg(not(unix))]
fn writable_by_others(_dir: &Path) -> std::io::Result<Option<u32>> {
    Ok(None)
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

    fn test_dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("rkeops-cache-test-{name}-{}", std::process::id()))
    }

    #[test]
    fn store_load_clear() {
        let dir = test_dir("basic");
        let cache = DiskCache::open(&dir).unwrap();
        assert!(cache.load("k").is_none());
        cache.store("k", b"binary").unwrap();
        assert_eq!(cache.load("k").unwrap(), b"binary");
        cache.store("k", b"other").unwrap();
        assert_eq!(cache.load("k").unwrap(), b"other");
        assert_eq!(cache.clear().unwrap(), 1);
        assert!(cache.load("k").is_none());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn damaged_entries_are_removed_and_missed() {
        let dir = test_dir("damaged");
        let cache = DiskCache::open(&dir).unwrap();
        let binary = b"0123456789 a compiled kernel".to_vec();
        let path = dir.join("k.cubin");
        for damage in [
            |b: &mut Vec<u8>| b.truncate(b.len() - 3),
            |b: &mut Vec<u8>| *b.last_mut().unwrap() ^= 1,
            |b: &mut Vec<u8>| b[0] = b'R',
            |b: &mut Vec<u8>| b.truncate(10),
        ] {
            cache.store("k", &binary).unwrap();
            assert_eq!(cache.load("k").unwrap(), binary);
            let mut bytes = fs::read(&path).unwrap();
            damage(&mut bytes);
            fs::write(&path, bytes).unwrap();
            assert!(cache.load("k").is_none(), "a damaged entry was loaded");
            assert!(!path.exists(), "a damaged entry was kept");
        }
        let _ = fs::remove_dir_all(dir);
    }

    #[cfg(unix)]
    #[test]
    fn directories_others_can_write_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = test_dir("shared");
        let _ = fs::remove_dir_all(&dir);
        DiskCache::open(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700, "created private");
        for mode in [0o777, 0o775, 0o1777] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
            let message = DiskCache::open(&dir).unwrap_err();
            assert!(message.contains(&dir.display().to_string()), "{message}");
            assert!(message.contains("can be written by other users"), "{message}");
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(DiskCache::open(&dir).is_ok());
        let _ = fs::remove_dir_all(dir);
    }
}
