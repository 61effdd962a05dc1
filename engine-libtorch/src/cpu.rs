//! Which vector instructions the CPU kernels ([`crate::gemm`], `crate::kernels`, the DSP and the
//! noise generator) may use: detected once at run time, capped by `SPEECHSTREAM_SIMD` so that one
//! machine can run (and time) every level it has. Every level gives the same bits as
//! [`Level::Baseline`]; the cap changes speed, never results.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// The environment variable that caps the level (`baseline`, `avx2`, `avxvnni`, `avx512`,
/// `avx512vnni`); unset: the best the CPU has.
pub const SIMD_ENV: &str = "SPEECHSTREAM_SIMD";

/// An instruction-set level, in the order the cap compares them. A CPU supports a subset (a
/// Skylake-X has `avx512` but not `avxvnni`): [`level`] is the highest supported one at or below
/// the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Portable Rust, vectorized by the compiler for the crate's target (SSE2 on x86-64).
    Baseline,
    /// AVX2 and FMA (Haswell, Zen 1-3): int8 products through `vpmaddubsw` pairs (exact: see
    /// `gemm`).
    Avx2,
    /// AVX2 with AVX-VNNI (256-bit dot products: Alder Lake and later client chips, Zen 5).
    AvxVnni,
    /// AVX-512 F/BW/DQ/VL without VNNI (Skylake-X).
    Avx512,
    /// AVX-512 with VNNI (Ice Lake and later servers, Zen 4+).
    Avx512Vnni,
}

pub const ALL: [Level; 5] = [Level::Baseline, Level::Avx2, Level::AvxVnni, Level::Avx512, Level::Avx512Vnni];

impl Level {
    /// Whether this CPU can run the level.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let avx512 = || has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl");
            match self {
                Level::Baseline => true,
                Level::Avx2 => has!("avx2") && has!("fma"),
                Level::AvxVnni => has!("avx2") && has!("fma") && has!("avxvnni"),
                Level::Avx512 => avx512(),
                Level::Avx512Vnni => avx512() && has!("avx512vnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Level::Baseline
        }
    }

    /// Whether the CPU has AMX's int8 tiles (CPUID leaf 7, EDX bit 25), which oneDNN (and so
    /// libtorch's `_int_mm`) uses where the kernel allows it.
    pub fn amx_int8() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID exists on every x86-64 CPU; leaf 7 is valid when leaf 0 reports it.
            use std::arch::x86_64::__cpuid_count;
            __cpuid_count(0, 0).eax >= 7 && __cpuid_count(7, 0).edx & (1 << 25) != 0
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Every level this CPU supports, lowest first.
    pub fn available() -> Vec<Level> {
        ALL.into_iter().filter(|l| l.supported()).collect()
    }

    /// The best level the CPU supports.
    pub fn detected() -> Level {
        Level::best_at_most(Level::Avx512Vnni)
    }

    /// The highest supported level at or below `cap`.
    pub fn best_at_most(cap: Level) -> Level {
        ALL.into_iter().rev().find(|l| *l <= cap && l.supported()).unwrap_or(Level::Baseline)
    }

    fn from_u8(v: u8) -> Level {
        ALL.get(v as usize).copied().unwrap_or(Level::Baseline)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Baseline => "baseline",
            Level::Avx2 => "avx2",
            Level::AvxVnni => "avxvnni",
            Level::Avx512 => "avx512",
            Level::Avx512Vnni => "avx512vnni",
        })
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        ALL.into_iter()
            .find(|l| l.to_string() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("{SIMD_ENV}={s:?}: one of {}", ALL.map(|l| l.to_string()).join(", ")))
    }
}

/// The cap from [`SIMD_ENV`] (read once), or an error naming the accepted values.
pub fn env_cap() -> Result<Option<Level>, String> {
    static CAP: OnceLock<Result<Option<Level>, String>> = OnceLock::new();
    CAP.get_or_init(|| match std::env::var(SIMD_ENV) {
        Ok(v) if !v.trim().is_empty() => v.parse().map(Some),
        _ => Ok(None),
    })
    .clone()
}

/// The level in force, +1 (0: not yet set from the environment).
static CURRENT: AtomicU8 = AtomicU8::new(0);

/// The level the kernels use now: [`SIMD_ENV`]'s cap (an invalid value counts as no cap; the
/// binary refuses it at start-up through [`env_cap`]) or [`set_cap`]'s, on what the CPU has.
pub fn level() -> Level {
    match CURRENT.load(Ordering::Relaxed) {
        0 => {
            let l = Level::best_at_most(env_cap().ok().flatten().unwrap_or(Level::Avx512Vnni));
            CURRENT.store(l as u8 + 1, Ordering::Relaxed);
            l
        }
        v => Level::from_u8(v - 1),
    }
}

/// Caps the level for the whole process from now on (tests and benchmarks compare levels with
/// it); returns the level now in force.
pub fn set_cap(cap: Level) -> Level {
    let l = Level::best_at_most(cap);
    CURRENT.store(l as u8 + 1, Ordering::Relaxed);
    l
}

/// Undoes [`set_cap`]: back to [`SIMD_ENV`]'s cap (or none); returns the level now in force.
pub fn reset_cap() -> Level {
    set_cap(env_cap().ok().flatten().unwrap_or(Level::Avx512Vnni))
}

/// Defines `fn NAME(args)` whose body is compiled three times, for the crate's target (SSE2 on
/// x86-64), for AVX2 (with FMA) and for AVX-512, picked at run time by [`level`]. The loops in
/// such bodies are written element by element with no reassociation, and fuse a multiply and an
/// add only where they say so (`mul_add`, exact everywhere: an instruction where the level has
/// one, libm's `fmaf` in the baseline), so LLVM vectorizes them and every version gives the same
/// bits.
macro_rules! simd_fn {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn imp($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw")]
                fn avx512($($arg: $ty),*) $(-> $ret)? {
                    imp($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    imp($($arg),*)
                }
                let level = $crate::cpu::level();
                if level >= $crate::cpu::Level::Avx512 {
                    // SAFETY: `level` is one the CPU supports.
                    return unsafe { avx512($($arg),*) };
                }
                if level >= $crate::cpu::Level::Avx2 {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            imp($($arg),*)
        }
    };
}
pub(crate) use simd_fn;

/// Asks for the cache line at `p` in L1 ahead of its use (a hint: no read happens, an address
/// outside any allocation is harmless, and other CPUs than x86-64 do without).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_order() {
        for l in ALL {
            assert_eq!(l.to_string().parse::<Level>(), Ok(l));
        }
        assert_eq!(" AVX2 ".parse::<Level>(), Ok(Level::Avx2));
        let e = "sse9".parse::<Level>().unwrap_err();
        assert!(e.contains("baseline, avx2, avxvnni, avx512, avx512vnni"), "{e}");
        assert!(Level::best_at_most(Level::Baseline) == Level::Baseline);
        assert!(Level::best_at_most(Level::Avx2) <= Level::Avx2);
        assert!(Level::available().contains(&Level::detected()));
    }
}
