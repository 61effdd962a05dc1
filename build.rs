//! Bakes an rpath to libtorch's lib dir into the `speechstream` binary (and the root package's
//! tests), so it runs without LD_LIBRARY_PATH. The engine crate passes the dir on as
//! `DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR` (see engine-libtorch/NOTES.md); `rustc-link-arg` reaches
//! only the package that emits it, hence this file.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
