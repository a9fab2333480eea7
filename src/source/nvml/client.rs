//! A loaded and initialised NVML: [`Nvml`] owns the symbol table, calls `nvmlInit_v2` once and
//! `nvmlShutdown` when dropped, and turns return codes into [`NvmlError`]s that name the call and
//! NVML's own text. Shared (`Arc`) by the NVML source and the per-process collector, so a host where
//! both run initialises NVML once.

use std::path::Path;
use std::sync::Arc;

use super::ffi::{self, nvmlReturn_t, LoadError, Symbols};

/// A failed NVML call: which one and NVML's code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {text} (NVML code {code})")]
pub struct NvmlError {
    pub call: &'static str,
    pub code: nvmlReturn_t,
    pub text: String,
}

impl NvmlError {
    /// The GPU fell off the bus or became inaccessible.
    pub fn gpu_lost(&self) -> bool {
        self.code == ffi::NVML_ERROR_GPU_IS_LOST
    }
}

/// Why NVML could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{library} loaded but nvmlInit failed: {error}")]
    Init { library: String, error: NvmlError },
}

/// A usable NVML.
pub struct Nvml {
    sym: Symbols,
}

impl Nvml {
    /// Load `path` (or search `libnvidia-ml.so.1`, `libnvidia-ml.so`) and initialise NVML.
    pub fn open(path: Option<&Path>) -> Result<Arc<Nvml>, OpenError> {
        let sym = match path {
            Some(p) => Symbols::load(p.as_os_str())?,
            None => Symbols::load_default()?,
        };
        let rc = sym.init();
        if rc != ffi::NVML_SUCCESS {
            let error = NvmlError {
                call: "nvmlInit_v2",
                code: rc,
                text: text_of(&sym, rc),
            };
            return Err(OpenError::Init {
                library: sym.path().to_string(),
                error,
            });
        }
        Ok(Arc::new(Nvml { sym }))
    }

    /// The raw calls.
    pub fn sym(&self) -> &Symbols {
        &self.sym
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &str {
        self.sym.path()
    }

    /// An error for `call` failing with `code`.
    pub fn error(&self, call: &'static str, code: nvmlReturn_t) -> NvmlError {
        NvmlError {
            call,
            code,
            text: text_of(&self.sym, code),
        }
    }

    /// `Ok` passes through; a code becomes an [`NvmlError`] naming `call`.
    pub fn check<T>(&self, call: &'static str, r: Result<T, nvmlReturn_t>) -> Result<T, NvmlError> {
        r.map_err(|code| self.error(call, code))
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        let _ = self.sym.shutdown();
    }
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml").field("path", &self.path()).finish()
    }
}

fn text_of(sym: &Symbols, code: nvmlReturn_t) -> String {
    sym.error_string(code).unwrap_or_else(|| match code {
        ffi::NVML_ERROR_FUNCTION_NOT_FOUND => "function not found".to_string(),
        _ => "unknown error".to_string(),
    })
}
