//! The one rule for a string a peer sends: printable ASCII (0x20 to 0x7e)
//! of at most the length its kind can honestly have. A peer's strings end
//! up on a terminal, in label values, on pages and in log lines, where a
//! control character (ESC, BEL, CR, a newline) could clear a screen, set
//! a window title or forge another line, and where a long one costs every
//! reader. A string that breaks the rule is refused whole, never trimmed
//! or escaped, so that no part of a forged value is shown as a peer's.

/// What a peer's string stands for, and so how long it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// A kernel release (`uname -r`, 64 bytes at most in the kernel's
    /// own struct; twice that for headroom).
    Release,
    /// A network interface name (IFNAMSIZ less the NUL).
    Interface,
    /// A congestion control name (TCP_CA_NAME_MAX less the NUL).
    Congestion,
    /// A peer's software name and version ("pathprobe/0.1.0").
    Software,
    /// A fingerprint setting's value (a sysctl, a driver, a list of
    /// offloads).
    SettingValue,
    /// One warning of a responder's, shown beside the result.
    Warning,
    /// One note of what a responder cut down to its limits.
    Note,
    /// The sentence of a refusal or an error (Busy, Rejected, Error).
    Message,
}

impl TextKind {
    /// The longest value of this kind, in bytes.
    pub const fn max_len(self) -> usize {
        match self {
            TextKind::Release => 128,
            TextKind::Interface => 15,
            TextKind::Congestion => 15,
            TextKind::Software => 64,
            TextKind::SettingValue => 128,
            TextKind::Warning => 200,
            TextKind::Note => 512,
            TextKind::Message => 1024,
        }
    }

    /// How the kind is named in a refusal.
    pub const fn as_str(self) -> &'static str {
        match self {
            TextKind::Release => "kernel release",
            TextKind::Interface => "interface name",
            TextKind::Congestion => "congestion control name",
            TextKind::Software => "software name",
            TextKind::SettingValue => "setting value",
            TextKind::Warning => "warning",
            TextKind::Note => "note",
            TextKind::Message => "message",
        }
    }
}

/// Whether every byte of `s` is printable ASCII (space to `~`).
pub fn printable(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Checks one string of a peer's against the rule for `kind`; the error
/// says what broke it, without repeating the string itself.
pub fn check(kind: TextKind, s: &str) -> Result<(), String> {
    let max = kind.max_len();
    if s.len() > max {
        return Err(format!(
            "its {} is {} bytes long, more than {max}",
            kind.as_str(),
            s.len()
        ));
    }
    if !printable(s) {
        return Err(format!(
            "its {} holds a byte that is not printable ASCII",
            kind.as_str()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_ascii_of_its_length_passes_and_nothing_else() {
        assert!(check(TextKind::Release, "6.1.0-13-amd64").is_ok());
        assert!(check(TextKind::Interface, "enp0s31f6").is_ok());
        assert!(check(TextKind::Interface, &"e".repeat(15)).is_ok());
        assert!(check(TextKind::Interface, &"e".repeat(16)).is_err());
        assert!(check(TextKind::Congestion, "cubic").is_ok());
        assert!(check(TextKind::Release, &"6".repeat(129)).is_err());
        for bad in [
            "a\u{1b}[2J",
            "a\u{7}",
            "a\rlevel=error",
            "a\nb",
            "a\tb",
            "é",
            "\u{7f}",
        ] {
            assert!(check(TextKind::Release, bad).is_err(), "{bad:?}");
        }
        // The error never repeats the string.
        let e = check(TextKind::Warning, "x\u{1b}]0;owned\u{7}").unwrap_err();
        assert!(!e.contains('\u{1b}') && !e.contains("owned"), "{e}");
    }
}
