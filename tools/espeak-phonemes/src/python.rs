// espeak-phonemes: speechstream's espeak-ng helper. Copyright the speechstream authors.
//
// This program is free software: you can redistribute it and/or modify it under the terms of the
// GNU General Public License as published by the Free Software Foundation, either version 3 of the
// License, or (at your option) any later version.
//
// This program is distributed in the hope that it will be useful, but WITHOUT ANY WARRANTY;
// without even the implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the
// GNU General Public License for more details: <https://www.gnu.org/licenses/>.

//! Stand-ins for the Python symbols that piper-tts's `espeakbridge.so` names.
//!
//! `espeakbridge.so` is a Python extension: besides espeak-ng it holds the module's own functions
//! (`initialize`, `set_voice`, `get_phonemes`), which call Python's C API. The dynamic loader must
//! find those names for `dlopen(RTLD_NOW)` to succeed (the four data symbols are bound at load
//! time whatever the mode), so the program defines them and exports them from its executable
//! (build.rs). Nothing ever calls them: the helper calls only the library's `espeak_*` functions,
//! never the module's; a call would abort the helper with a message rather than go on wrongly.
//! With Debian's libespeak-ng, which names no Python symbol, they are unused.
#![allow(non_upper_case_globals, non_snake_case)]

use std::sync::atomic::AtomicUsize;

/// The symbols defined here, which build.rs exports (keep the two lists the same).
#[cfg(test)]
pub const NAMES: [&str; 11] = [
    "PyExc_RuntimeError",
    "_Py_FalseStruct",
    "_Py_NoneStruct",
    "_Py_TrueStruct",
    "PyArg_ParseTuple",
    "PyErr_Format",
    "PyErr_SetString",
    "PyList_Append",
    "PyList_New",
    "PyModule_Create2",
    "Py_BuildValue",
];

/// Room for a Python object's header (refcount, type), in writable memory.
type Object = [AtomicUsize; 4];

#[no_mangle]
#[used]
pub static PyExc_RuntimeError: Object = [const { AtomicUsize::new(0) }; 4];
#[no_mangle]
#[used]
pub static _Py_FalseStruct: Object = [const { AtomicUsize::new(0) }; 4];
#[no_mangle]
#[used]
pub static _Py_NoneStruct: Object = [const { AtomicUsize::new(0) }; 4];
#[no_mangle]
#[used]
pub static _Py_TrueStruct: Object = [const { AtomicUsize::new(0) }; 4];

/// What a call of a Python function means: the library ran its Python module's code.
fn called(name: &str) -> ! {
    eprintln!("espeak-phonemes: the espeak-ng library called Python's {name}, which this program does not have");
    std::process::abort()
}

#[no_mangle]
pub extern "C" fn PyArg_ParseTuple() -> i32 {
    called("PyArg_ParseTuple")
}
#[no_mangle]
pub extern "C" fn PyErr_Format() -> *mut u8 {
    called("PyErr_Format")
}
#[no_mangle]
pub extern "C" fn PyErr_SetString() {
    called("PyErr_SetString")
}
#[no_mangle]
pub extern "C" fn PyList_Append() -> i32 {
    called("PyList_Append")
}
#[no_mangle]
pub extern "C" fn PyList_New() -> *mut u8 {
    called("PyList_New")
}
#[no_mangle]
pub extern "C" fn PyModule_Create2() -> *mut u8 {
    called("PyModule_Create2")
}
#[no_mangle]
pub extern "C" fn Py_BuildValue() -> *mut u8 {
    called("Py_BuildValue")
}
