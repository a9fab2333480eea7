//! Give the built `libfake_libnvml.so` the SONAME of the real library, `libnvidia-ml.so.1`, so a
//! symlink named `libnvidia-ml.so.1` is indistinguishable from the driver's to the dynamic loader.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
    }
}
