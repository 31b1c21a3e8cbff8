//! Process resource limits. The responder and the HTTP server each take a
//! descriptor per connection, and the default soft limit of 1024 lets a
//! peer that opens a thousand idle connections starve the service of
//! descriptors; the hard limit is what the operator (or systemd's
//! `LimitNOFILE=`) granted, so the service raises the soft limit to it.

use std::io;

/// The soft limit to set given the current (soft, hard) pair: the hard
/// limit, or `None` when the soft one is already there.
pub fn nofile_target(soft: u64, hard: u64) -> Option<u64> {
    (soft < hard).then_some(hard)
}

/// Reads RLIMIT_NOFILE as (soft, hard).
pub fn nofile_limit() -> io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and passes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is u64 on Linux but not on every libc target.
    #[allow(clippy::unnecessary_cast)]
    Ok((lim.rlim_cur as u64, lim.rlim_max as u64))
}

/// Raises the soft RLIMIT_NOFILE to the hard limit and returns the soft
/// limit now in force. Raising the soft limit up to the hard one needs no
/// privilege.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let (soft, hard) = nofile_limit()?;
    let Some(target) = nofile_target(soft, hard) else {
        return Ok(soft);
    };
    let lim = libc::rlimit {
        rlim_cur: target as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit only reads the struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(nofile_limit()?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_the_hard_limit_when_soft_is_below() {
        assert_eq!(nofile_target(1024, 524_288), Some(524_288));
        assert_eq!(nofile_target(65_536, 65_536), None);
        assert_eq!(nofile_target(u64::MAX, u64::MAX), None);
    }

    #[test]
    fn raise_sets_the_soft_limit_to_the_hard_one() {
        let now = raise_nofile_limit().unwrap();
        let (soft, hard) = nofile_limit().unwrap();
        assert_eq!(now, soft);
        assert_eq!(soft, hard);
    }
}
