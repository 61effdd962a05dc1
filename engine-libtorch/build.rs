//! Bakes an rpath to libtorch's lib dir into this crate's binaries (tests, examples, benches), so
//! they run without LD_LIBRARY_PATH, and passes the dir on to dependents as
//! `DEP_SPEECHSTREAM_LIBTORCH_LIB_DIR` (their own build.rs must emit the rpath: `rustc-link-arg`
//! only applies to the crate that emits it; see NOTES.md).
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let dir = std::env::var_os("DEP_TCH_LIBTORCH_LIB")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("LIBTORCH").map(|p| PathBuf::from(p).join("lib")));
    if let Some(dir) = dir {
        let dir = dir.canonicalize().unwrap_or(dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:lib_dir={}", dir.display());
        println!("cargo:rustc-env=SPEECHSTREAM_LIBTORCH_LIB={}", dir.display());
    }
}
