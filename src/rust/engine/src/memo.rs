//! Values made once per process and kept for the next calls that ask for them (formulas parsed
//! once per program or per step, not at every call of an optimiser's loop): a map of at most a
//! number of entries, emptied when full.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, OnceLock};

/// A process-wide map of made values (a `static`).
pub(crate) type Memo<K, V> = OnceLock<Mutex<HashMap<K, V>>>;

/// The value kept in `memo` under `key`, else the one `make` gives, kept there (the map emptied
/// first when it holds `most` entries; an error is not kept).
pub(crate) fn kept_or_made<K: Eq + Hash, V: Clone, E>(
    memo: &Memo<K, V>,
    most: usize,
    key: K,
    make: impl FnOnce() -> Result<V, E>,
) -> Result<V, E> {
    let map = memo.get_or_init(Default::default);
    if let Some(v) = map.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(v);
    }
    let v = make()?;
    if let Ok(mut m) = map.lock() {
        if m.len() >= most {
            m.clear();
        }
        m.insert(key, v.clone());
    }
    Ok(v)
}
