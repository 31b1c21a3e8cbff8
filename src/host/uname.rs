//! Kernel release, kernel version and host name, as labels for reports and
//! metrics (a throughput change after a kernel upgrade should be visible).

#![warn(missing_docs)]

/// `uname -r`, e.g. `"6.8.0-45-generic"`. Empty if uname(2) fails.
pub fn kernel_release() -> String {
    uname().map(|u| field(&u.release)).unwrap_or_default()
}

/// `uname -v`, e.g. `"#45-Ubuntu SMP PREEMPT_DYNAMIC ..."`. Empty if
/// uname(2) fails.
pub fn kernel_version() -> String {
    uname().map(|u| field(&u.version)).unwrap_or_default()
}

/// The node name (`uname -n`), which is what `hostname` prints. Empty if
/// uname(2) fails.
pub fn hostname() -> String {
    uname().map(|u| field(&u.nodename)).unwrap_or_default()
}

fn uname() -> Option<libc::utsname> {
    // SAFETY: utsname is arrays of c_char, for which all-zero is valid.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname for the call.
    (unsafe { libc::uname(&mut u) } == 0).then_some(u)
}

/// The text of a NUL-terminated fixed-size field, without trusting that the
/// NUL is there.
fn field(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_kernel(name: &str) -> String {
        std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
            .unwrap()
            .trim_end_matches('\n')
            .to_string()
    }

    #[test]
    fn matches_proc_sys_kernel() {
        assert_eq!(kernel_release(), proc_kernel("osrelease"));
        assert_eq!(kernel_version(), proc_kernel("version"));
        assert_eq!(hostname(), proc_kernel("hostname"));
        assert!(!kernel_release().is_empty());
    }

    #[test]
    fn field_stops_at_nul_or_end() {
        let with_nul = [
            b'6' as libc::c_char,
            b'.' as libc::c_char,
            0,
            b'x' as libc::c_char,
        ];
        assert_eq!(field(&with_nul), "6.");
        let without_nul = [b'a' as libc::c_char; 3];
        assert_eq!(field(&without_nul), "aaa");
        assert_eq!(field(&[]), "");
    }
}
