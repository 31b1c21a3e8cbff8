//! Reading what one `recvmsg(MSG_ERRQUEUE)` returned: the extended errors
//! (`IP_RECVERR`, `IPV6_RECVERR`) in its control messages, each with the
//! address the kernel puts after it (`SO_EE_OFFENDER`: the router that sent
//! an ICMP error). A trace's hops ([`crate::trace`]) and `MSG_ZEROCOPY`'s
//! completions ([`super::msg_zerocopy`]) both come this way; the walk over
//! the kernel's buffer is the unsafe part, so it is written once.

use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One extended error, and the offender's address when a whole one
/// followed it.
#[derive(Debug, Clone, Copy)]
pub struct ExtendedError {
    pub err: libc::sock_extended_err,
    pub offender: Option<IpAddr>,
}

/// The extended errors of one message, in the kernel's order; other
/// control messages, and ones too short to hold an error, are skipped.
pub struct ExtendedErrors<'a> {
    msg: &'a libc::msghdr,
    next: *const libc::cmsghdr,
}

/// Walks the control messages of `msg`.
///
/// # Safety
/// `msg` is what `recvmsg` filled: `msg_control` points at a buffer that
/// stays valid while the walk lasts, of which the kernel wrote
/// `msg_controllen` bytes.
pub unsafe fn extended_errors(msg: &libc::msghdr) -> ExtendedErrors<'_> {
    ExtendedErrors {
        msg,
        next: libc::CMSG_FIRSTHDR(msg),
    }
}

impl Iterator for ExtendedErrors<'_> {
    type Item = ExtendedError;

    // `cmsg_len` is a usize with glibc and a u32 with musl.
    #[allow(clippy::unnecessary_cast)]
    fn next(&mut self) -> Option<ExtendedError> {
        // SAFETY: CMSG_LEN is arithmetic.
        let need = unsafe { libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) } as usize;
        while !self.next.is_null() {
            let c = self.next;
            // SAFETY: `extended_errors`' contract: CMSG_FIRSTHDR and
            // CMSG_NXTHDR return headers inside the `msg_controllen` bytes
            // the kernel wrote, or null; each is read only after its length
            // says its data is there, and unaligned.
            unsafe {
                self.next = libc::CMSG_NXTHDR(self.msg, c);
                let h = &*c;
                let ours = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
                    || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
                if !ours || (h.cmsg_len as usize) < need {
                    continue;
                }
                let ee = libc::CMSG_DATA(c) as *const libc::sock_extended_err;
                let err = std::ptr::read_unaligned(ee);
                let room = h.cmsg_len as usize - need;
                let offender = read_addr(libc::SO_EE_OFFENDER(ee) as *const u8, room);
                return Some(ExtendedError { err, offender });
            }
        }
        None
    }
}

/// The address at `p`, if `room` bytes hold a whole sockaddr of its
/// family.
///
/// # Safety
/// `p` must be valid for reads of `room` bytes.
unsafe fn read_addr(p: *const u8, room: usize) -> Option<IpAddr> {
    if room < size_of::<libc::sa_family_t>() {
        return None;
    }
    let family = std::ptr::read_unaligned(p as *const libc::sa_family_t);
    match family as libc::c_int {
        libc::AF_INET if room >= size_of::<libc::sockaddr_in>() => {
            let a = std::ptr::read_unaligned(p as *const libc::sockaddr_in);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))))
        }
        libc::AF_INET6 if room >= size_of::<libc::sockaddr_in6>() => {
            let a = std::ptr::read_unaligned(p as *const libc::sockaddr_in6);
            Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control buffer as the kernel lays it out: an unrelated message,
    /// then an `IP_RECVERR` with an ICMP error and its offender, then one
    /// cut short.
    #[test]
    fn errors_and_offenders_are_read_and_other_messages_skipped() {
        let mut control = [0u64; 64];
        let base = control.as_mut_ptr() as *mut u8;
        let ee_len = size_of::<libc::sock_extended_err>() as u32;
        let sin_len = size_of::<libc::sockaddr_in>() as u32;
        // SAFETY: CMSG_SPACE is plain arithmetic.
        let (first, second, third) = unsafe {
            (
                libc::CMSG_SPACE(16) as usize,
                libc::CMSG_SPACE(ee_len + sin_len) as usize,
                libc::CMSG_SPACE(4) as usize,
            )
        };
        assert!(first + second + third <= std::mem::size_of_val(&control));
        // SAFETY: each header and its data lie inside `control` (checked
        // just above), written unaligned-safe where it matters.
        unsafe {
            let header = |at: usize, level, kind, len: u32| {
                let c = base.add(at) as *mut libc::cmsghdr;
                (*c).cmsg_level = level;
                (*c).cmsg_type = kind;
                (*c).cmsg_len = libc::CMSG_LEN(len) as _;
                libc::CMSG_DATA(c)
            };
            header(0, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 16);
            let data = header(first, libc::SOL_IP, libc::IP_RECVERR, ee_len + sin_len);
            let mut ee: libc::sock_extended_err = std::mem::zeroed();
            ee.ee_origin = libc::SO_EE_ORIGIN_ICMP;
            ee.ee_type = 11;
            std::ptr::write_unaligned(data as *mut libc::sock_extended_err, ee);
            let mut sin: libc::sockaddr_in = std::mem::zeroed();
            sin.sin_family = libc::AF_INET as _;
            sin.sin_addr.s_addr = u32::from(Ipv4Addr::new(10, 0, 0, 1)).to_be();
            let at = data.add(ee_len as usize) as *mut libc::sockaddr_in;
            std::ptr::write_unaligned(at, sin);
            // An error whose message is too short to hold it: skipped.
            header(first + second, libc::SOL_IP, libc::IP_RECVERR, 4);
        }
        // SAFETY: an all-zero msghdr is valid; the control buffer outlives
        // the walk, and its first `msg_controllen` bytes were written.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = (first + second + third) as _;
        let got: Vec<_> = unsafe { extended_errors(&msg) }.collect();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].err.ee_origin, libc::SO_EE_ORIGIN_ICMP);
        assert_eq!(got[0].err.ee_type, 11);
        assert_eq!(
            got[0].offender,
            Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))
        );
    }
}
