//! With the `hibari` feature, bakes an rpath to libtorch's lib dir into the binaries that link it (the
//! engine crate passes its dir on as `DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR`; see engine-libtorch/NOTES.md),
//! so it runs without LD_LIBRARY_PATH. Nothing otherwise.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR") {
        println!("cargo:rustc-link-arg-bin=hibari-rtf=-Wl,-rpath,{dir}");
        println!("cargo:rustc-link-arg-bin=device-check=-Wl,-rpath,{dir}");
        println!("cargo:rustc-link-arg-bin=int8-gemm=-Wl,-rpath,{dir}");
    }
}
