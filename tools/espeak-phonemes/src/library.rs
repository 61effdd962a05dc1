// espeak-phonemes: speechstream's espeak-ng helper. Copyright the speechstream authors.
//
// This program is free software: you can redistribute it and/or modify it under the terms of the
// GNU General Public License as published by the Free Software Foundation, either version 3 of the
// License, or (at your option) any later version. It loads libespeak-ng (GPL-3.0-or-later).
//
// This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY;
// without even the implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the
// GNU General Public License for more details: <https://www.gnu.org/licenses/>.

//! The espeak-ng library, loaded at start-up with `dlopen`: Debian's `libespeak-ng.so.1` by
//! default, or another build named by `--library` (piper-tts's `espeakbridge.so`, which holds
//! espeak-ng 1.52.0.1 and exports its whole C API). The program does not link libespeak-ng:
//! every espeak function is called through a pointer that `dlsym` found in that library's handle,
//! so there is one code path whichever build runs.
//!
//! The library is opened with `RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND`: every symbol is resolved
//! at once (a missing one is an error at start-up, not a crash later), none leaks into the global
//! scope, and the library's own calls of its own functions bind to its own copies before anything
//! else the process has loaded. `libm.so.6` is loaded globally first: piper's `espeakbridge.so`
//! calls `cos`, `exp` and `pow` without naming libm. Its Python symbols are [`crate::python`]'s.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

/// The library opened when `--library` is not given: Debian's (package `libespeak-ng1`).
pub const DEFAULT: &str = "libespeak-ng.so.1";

const RTLD_NOW: c_int = 0x0002;
const RTLD_LOCAL: c_int = 0;
const RTLD_GLOBAL: c_int = 0x0100;
const RTLD_DEEPBIND: c_int = 0x0008;

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// `espeak_VOICE` (speak_lib.h); only the first three fields are read.
#[repr(C)]
pub struct EspeakVoice {
    pub name: *const c_char,
    pub languages: *const c_char,
    pub identifier: *const c_char,
    pub gender: u8,
    pub age: u8,
    pub variant: u8,
    pub xx1: u8,
    pub score: c_int,
    pub spare: *mut c_void,
}

/// `espeak_Initialize`.
pub type Initialize = unsafe extern "C" fn(c_int, c_int, *const c_char, c_int) -> c_int;
/// `espeak_Info`.
pub type Info = unsafe extern "C" fn(*mut *const c_char) -> *const c_char;
/// `espeak_ListVoices`.
pub type ListVoices = unsafe extern "C" fn(*mut EspeakVoice) -> *mut *const EspeakVoice;
/// `espeak_SetVoiceByName`.
pub type SetVoiceByName = unsafe extern "C" fn(*const c_char) -> c_int;
/// `espeak_TextToPhonemes`.
pub type TextToPhonemes = unsafe extern "C" fn(*mut *const c_void, c_int, c_int) -> *const c_char;
/// `espeak_TextToPhonemesWithTerminator` (espeak-ng 1.52 and later).
pub type TextToPhonemesWithTerminator =
    unsafe extern "C" fn(*mut *const c_void, c_int, c_int, *mut c_int) -> *const c_char;

/// The espeak functions of one loaded library (it stays loaded until the process ends).
pub struct Library {
    pub initialize: Initialize,
    pub info: Info,
    pub list_voices: ListVoices,
    pub set_voice_by_name: SetVoiceByName,
    pub text_to_phonemes: TextToPhonemes,
    /// None with espeak-ng 1.51, which lacks it.
    pub text_to_phonemes_with_terminator: Option<TextToPhonemesWithTerminator>,
}

/// `dlerror`'s message, or `what` when there is none.
fn last_error(what: &str) -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl call.
    let e = unsafe { dlerror() };
    if e.is_null() {
        what.to_string()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The address of `name` in the library of `handle`, or null.
fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: `handle` is a live handle from dlopen (never closed); `name` is NUL-terminated.
    unsafe { dlsym(handle, name.as_ptr()) }
}

impl Library {
    /// Opens `path` (a file name is looked up as `dlopen` looks it up; a path with a `/` is opened
    /// as it is) and finds its espeak functions.
    pub fn open(path: &Path) -> Result<Library, String> {
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{}: a library path holds no NUL", path.display()))?;
        // SAFETY: dlopen of the system's libm (always present with glibc); RTLD_GLOBAL makes its
        // functions available to the library loaded next.
        unsafe { dlopen(c"libm.so.6".as_ptr(), RTLD_NOW | RTLD_GLOBAL) };
        // SAFETY: loading the library runs its initialisers, which for espeak-ng only set up C
        // runtime state; the handle is kept for the life of the process.
        let handle = unsafe { dlopen(c_path.as_ptr(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) };
        if handle.is_null() {
            return Err(format!(
                "the espeak-ng library {} could not be loaded: {}",
                path.display(),
                last_error("dlopen failed")
            ));
        }
        let required = |name: &CStr| -> Result<*mut c_void, String> {
            let p = symbol(handle, name);
            if p.is_null() {
                Err(format!("{} is not an espeak-ng library: it has no {}", path.display(), name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        // SAFETY (each transmute): the symbol is espeak-ng's function of that name, whose C type
        // (speak_lib.h) this is.
        unsafe {
            Ok(Library {
                initialize: std::mem::transmute::<*mut c_void, Initialize>(required(c"espeak_Initialize")?),
                info: std::mem::transmute::<*mut c_void, Info>(required(c"espeak_Info")?),
                list_voices: std::mem::transmute::<*mut c_void, ListVoices>(required(c"espeak_ListVoices")?),
                set_voice_by_name: std::mem::transmute::<*mut c_void, SetVoiceByName>(required(
                    c"espeak_SetVoiceByName",
                )?),
                text_to_phonemes: std::mem::transmute::<*mut c_void, TextToPhonemes>(required(
                    c"espeak_TextToPhonemes",
                )?),
                text_to_phonemes_with_terminator: {
                    let p = symbol(handle, c"espeak_TextToPhonemesWithTerminator");
                    (!p.is_null()).then(|| std::mem::transmute::<*mut c_void, TextToPhonemesWithTerminator>(p))
                },
            })
        }
    }
}
