//! What Linux's /proc says about another process: resident memory and CPU time. Used to
//! measure a server under load from the outside, whatever language it is written in.

use std::fs;
use std::io;

/// `VmRSS` of `pid`, in KiB.
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    status_field_kib(pid, "VmRSS:")
}

/// `VmHWM` (peak resident memory) of `pid`, in KiB.
pub fn peak_rss_kib(pid: u32) -> io::Result<u64> {
    status_field_kib(pid, "VmHWM:")
}

fn status_field_kib(pid: u32, field: &str) -> io::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no {field} in /proc/{pid}/status")))
}

/// User + system CPU time `pid` (all its threads) has used, in seconds.
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses; fields after the last ')'
    // are plain. utime and stime are fields 14 and 15, i.e. 12th and 13th after it.
    let after =
        stat.rfind(')').map(|i| &stat[i + 1..]).ok_or_else(|| io::Error::other("malformed /proc/<pid>/stat"))?;
    let mut fields = after.split_whitespace().skip(11);
    let mut next = || -> io::Result<u64> {
        fields.next().and_then(|v| v.parse().ok()).ok_or_else(|| io::Error::other("malformed /proc/<pid>/stat"))
    };
    let ticks = next()? + next()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok(ticks as f64 / hz)
}

/// Raise this process's soft RLIMIT_NOFILE to the hard limit (at least `want` descriptors
/// are needed for `want` connections). Returns the soft limit now in force.
pub fn raise_nofile_limit(want: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` is a valid rlimit with cur <= max.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(rss_kib(pid).unwrap() > 0);
        assert!(peak_rss_kib(pid).unwrap() > 0);
        assert!(cpu_seconds(pid).unwrap() >= 0.0);
        assert!(raise_nofile_limit(16).unwrap() >= 16);
    }
}
