//! The libdcgm source: reads real GPUs through NVIDIA's DCGM C library, loaded at run time.
//!
//! `ffi` holds the C ABI (structs, constants, symbol table) and is the only place with `unsafe`.

pub mod ffi;
