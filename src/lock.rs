//! Poison-tolerant locking. A thread that panicked while holding a lock leaves it poisoned; the data
//! behind every lock in this exporter stays consistent at each statement (caches, registries, queues),
//! so the right answer is to keep serving with it rather than to propagate the panic to every other
//! thread (a panic on the collector or an OTel callback would silently stop all exports).

use std::sync::{Mutex, MutexGuard};

/// `lock()` that recovers the guard of a poisoned mutex.
pub trait LockExt<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        match self.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_mutex_still_gives_its_data() {
        let m = Arc::new(Mutex::new(5));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock_unpoisoned();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.lock_unpoisoned(), 5);
    }
}
