// Links Debian's libespeak-ng (apt-get install libespeak-ng-dev); ESPEAK_NG_LIB_DIR names another
// directory holding libespeak-ng.so.
fn main() {
    println!("cargo:rerun-if-env-changed=ESPEAK_NG_LIB_DIR");
    if let Some(dir) = std::env::var_os("ESPEAK_NG_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    println!("cargo:rustc-link-lib=dylib=espeak-ng");
}
