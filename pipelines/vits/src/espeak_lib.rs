//! espeak-ng as a library (`libespeak-ng.so.1`, loaded at run time): the
//! same `espeak_TextToPhonemes` translation that Piper's phonemizer uses.
//!
//! Key design choices:
//! - Why not the `espeak-ng` program: its `--ipa` output is a trace printed
//!   while it synthesizes, and that path stresses a clause of one unstressed
//!   word differently from the text-to-phonemes translation Piper calls
//!   (`what?` is `wˈʌt` from the program, `wˌʌt` from the library, with the
//!   same espeak-ng 1.51). The library is what the `espeak-ng` Debian package
//!   already installs, so nothing new is required.
//! - Loaded with `dlopen` at first use (no link-time dependency, so the crate
//!   builds without espeak-ng and a missing library is an error at pipeline
//!   open); initialized once per process; espeak-ng keeps global state, so
//!   every call holds one process-wide lock and sets its voice first.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// `AUDIO_OUTPUT_SYNCHRONOUS`: no audio device is opened.
const AUDIO_OUTPUT_SYNCHRONOUS: c_int = 2;
/// `espeakCHARS_UTF8`.
const CHARS_UTF8: c_int = 1;
/// Phoneme mode bit 1: IPA as UTF-8.
const PHONEMES_IPA: c_int = 0x02;

type InitFn = unsafe extern "C" fn(c_int, c_int, *const c_char, c_int) -> c_int;
type SetVoiceFn = unsafe extern "C" fn(*const c_char) -> c_int;
type TextToPhonemesFn = unsafe extern "C" fn(*mut *const c_void, c_int, c_int) -> *const c_char;

/// The loaded library and its entry points.
struct Lib {
    set_voice: SetVoiceFn,
    text_to_phonemes: TextToPhonemesFn,
    /// Keeps the code behind the function pointers mapped.
    _lib: libloading::Library,
}

/// The library name (`$FAVLO_ESPEAK_NG_LIB` overrides it).
fn lib_name() -> String {
    std::env::var("FAVLO_ESPEAK_NG_LIB").unwrap_or_else(|_| "libespeak-ng.so.1".to_string())
}

fn load() -> Result<Lib, String> {
    let name = lib_name();
    // SAFETY: loading libespeak-ng runs its (trivial) initializers only.
    let lib = unsafe { libloading::Library::new(&name) }.map_err(|e| format!("{name}: {e}"))?;
    // SAFETY: the symbol types are espeak-ng's published C signatures
    // (speak_lib.h, API revision ≥ 12).
    let (init, set_voice, text_to_phonemes) = unsafe {
        let init = *lib
            .get::<InitFn>(b"espeak_Initialize\0")
            .map_err(|e| e.to_string())?;
        let sv = *lib
            .get::<SetVoiceFn>(b"espeak_SetVoiceByName\0")
            .map_err(|e| e.to_string())?;
        let tp = *lib
            .get::<TextToPhonemesFn>(b"espeak_TextToPhonemes\0")
            .map_err(|e| e.to_string())?;
        (init, sv, tp)
    };
    // SAFETY: a null path means espeak-ng's default data directory.
    let rate = unsafe { init(AUDIO_OUTPUT_SYNCHRONOUS, 0, std::ptr::null(), 0) };
    if rate <= 0 {
        return Err(format!("{name}: espeak_Initialize failed ({rate})"));
    }
    Ok(Lib {
        set_voice,
        text_to_phonemes,
        _lib: lib,
    })
}

/// The process's library, loaded once (`Err` says why it is unusable).
fn lib() -> &'static Result<Mutex<Lib>, String> {
    static LIB: OnceLock<Result<Mutex<Lib>, String>> = OnceLock::new();
    LIB.get_or_init(|| load().map(Mutex::new))
}

/// Whether the library loads (the reason when it does not).
pub fn check() -> Result<(), String> {
    lib().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// IPA of `text` for `voice`: every clause espeak-ng finds, joined without a
/// separator (as Piper joins a clause that has no terminator).
pub fn ipa(voice: &str, text: &str) -> Result<String, String> {
    let lib = lib().as_ref().map_err(Clone::clone)?;
    let lib = lib
        .lock()
        .map_err(|_| "espeak-ng lock poisoned".to_string())?;
    let voice_c = CString::new(voice).map_err(|e| e.to_string())?;
    // Interior NULs would end the text early; espeak-ng reads UTF-8 to NUL.
    let text_c = CString::new(text.replace('\0', " ")).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated voice name.
    if unsafe { (lib.set_voice)(voice_c.as_ptr()) } != 0 {
        return Err(format!("espeak-ng has no voice {voice:?}"));
    }
    let mut out = String::new();
    let mut ptr: *const c_void = text_c.as_ptr().cast();
    // Each call consumes one clause and advances `ptr` (null at the end).
    for _ in 0..=text.len() {
        if ptr.is_null() {
            break;
        }
        // SAFETY: `ptr` points into `text_c` (alive for the loop) or is what
        // espeak-ng advanced it to; the result is espeak-ng's NUL-terminated
        // buffer, copied before the next call.
        let ph = unsafe { (lib.text_to_phonemes)(&mut ptr, CHARS_UTF8, PHONEMES_IPA) };
        if !ph.is_null() {
            // SAFETY: as above.
            out.push_str(&unsafe { CStr::from_ptr(ph) }.to_string_lossy());
        }
    }
    Ok(out)
}
