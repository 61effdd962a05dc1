// The program loads libespeak-ng at run time (dlopen: src/library.rs) and links nothing of
// espeak-ng. It exports the Python symbols of src/python.rs from the executable (listed in
// python-symbols.list), so that piper-tts's espeakbridge.so, a Python extension, can be loaded.
fn main() {
    let list = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python-symbols.list");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rustc-link-arg=-Wl,--dynamic-list={}", list.display());
}
