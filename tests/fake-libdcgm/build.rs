//! Give the built `libfake_libdcgm.so` the SONAME of the real library, `libdcgm.so.4`, so a copy or
//! symlink named `libdcgm.so.4` is indistinguishable from NVIDIA's to the dynamic loader.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdcgm.so.4");
    }
}
