//! Giving freed heap memory back to the system after a CPU profile (`--enable-pprof`). Naming a
//! profile's functions parses the binary's symbol and line tables into many small allocations; once
//! they are freed, glibc's allocator keeps the pages for reuse, so the process would stay that much
//! larger for good. `malloc_trim(0)` returns every whole free page of every arena to the system.
//!
//! An FFI module (one C call, no safe form in std), with its own `#![allow(unsafe_code)]`. On a C
//! library other than glibc (musl has no `malloc_trim`) it does nothing.
#![allow(unsafe_code)]

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    extern "C" {
        /// glibc's `int malloc_trim(size_t pad)`: release free memory from the heap; 1 when some was.
        pub fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
}

/// Return the allocator's free pages to the system. True when glibc released some.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a plain integer, touches only the allocator's own state under its
        // own locks, and is safe to call from any thread at any time (glibc's malloc_trim(3)).
        unsafe { glibc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
