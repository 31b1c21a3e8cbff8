//! Why a probe produced no result: the error both ends' data paths and the
//! prober's conversation return, with a fixed label per cause for metrics.

use std::time::Duration;

use crate::protocol::RejectReason;

/// Why a probe produced no result. [`ProbeError::reason`] gives a short,
/// fixed label for metrics; the message says what happened and what to try.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("bad argument: {0}")]
    BadArgument(String),
    #[error("cannot resolve {target}: {source}")]
    Resolve {
        target: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection to {addr} refused: is `pathprobe respond` running there, on that port?")]
    Refused { addr: String },
    #[error("{addr} is unreachable: {source}")]
    Unreachable {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("timed out after {after:?} while {stage}")]
    Timeout {
        stage: &'static str,
        after: Duration,
    },
    #[error("{}", busy_text(message, *retry_after))]
    Busy {
        retry_after: Duration,
        message: String,
    },
    #[error("version mismatch: {0}")]
    VersionMismatch(String),
    #[error("responder refused the test ({}): {message}", reason.as_str())]
    Rejected {
        reason: RejectReason,
        message: String,
    },
    /// The prober holds a secret and the responder did not prove it holds
    /// the same one.
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("the peer ended the test: {0}")]
    Aborted(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// A busy refusal said once: the responder's own message (which names the
/// wait already) after "busy", with the hint's wait only when the message
/// gives none (a stock iperf3 server's does not).
fn busy_text(message: &str, retry_after: Duration) -> String {
    let message = message.strip_prefix("responder is ").unwrap_or(message);
    let mut text = if message.is_empty() {
        "responder is busy".to_string()
    } else if message.contains("busy") {
        message.to_string()
    } else {
        format!("responder is busy: {message}")
    };
    if !text.contains("retry") {
        text += &format!("; retry in {:.0} s", retry_after.as_secs_f64().ceil());
    }
    text
}

impl ProbeError {
    /// A local I/O failure while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> ProbeError {
        ProbeError::Io {
            context: context.into(),
            source,
        }
    }

    /// Every value [`ProbeError::reason`] can return, so that a counter
    /// labelled by it can start every series at 0: a failure reason whose
    /// series first appears at 1 is invisible to `increase()`.
    pub const REASONS: &'static [&'static str] = &[
        "bad_argument",
        "resolve",
        "refused",
        "unreachable",
        "timeout",
        "busy",
        "version_unsupported",
        "auth_required",
        "auth_failed",
        "denied",
        "rejected",
        "protocol_error",
        "aborted",
        "io_error",
    ];

    /// A fixed label for metrics and JSON.
    pub fn reason(&self) -> &'static str {
        match self {
            ProbeError::BadArgument(_) => "bad_argument",
            ProbeError::Resolve { .. } => "resolve",
            ProbeError::Refused { .. } => "refused",
            ProbeError::Unreachable { .. } => "unreachable",
            ProbeError::Timeout { .. } => "timeout",
            ProbeError::Busy { .. } => "busy",
            // Only a gap of more than one version is left: during a rolling
            // upgrade, a pair that cannot measure each other until the
            // older end is upgraded (docs/MESH.md counts it as a rest).
            ProbeError::VersionMismatch(_) => "version_unsupported",
            ProbeError::Rejected { reason, .. } => match reason {
                // Access problems get labels of their own: they call for a
                // configuration fix, not for asking less.
                RejectReason::AuthRequired => "auth_required",
                RejectReason::AuthFailed => "auth_failed",
                RejectReason::Denied => "denied",
                _ => "rejected",
            },
            ProbeError::Auth(_) => "auth_failed",
            ProbeError::Protocol(_) => "protocol_error",
            ProbeError::Aborted(_) => "aborted",
            ProbeError::Io { .. } => "io_error",
        }
    }

    /// What the user could try next.
    pub fn hint(&self) -> &'static str {
        match self {
            ProbeError::BadArgument(_) => "see `pathprobe probe --help`",
            ProbeError::Resolve { .. } => "check the host name, or give an IP address",
            ProbeError::Refused { .. } => "start `pathprobe respond` on the target, or give the right port with -p",
            ProbeError::Unreachable { .. } => "check the route and firewall to the target",
            ProbeError::Timeout { .. } => "check that a firewall lets the responder's TCP and UDP port through",
            ProbeError::Busy { .. } => "it runs one test at a time",
            ProbeError::VersionMismatch(_) => "adjacent releases negotiate a common protocol version; upgrade the older end to within one release of the other",
            ProbeError::Rejected { reason, .. } => match reason {
                RejectReason::AuthRequired | RejectReason::AuthFailed => {
                    "give the responder's shared secret with --auth.secret-file (or secret_file in the module), the same secret on both ends"
                }
                RejectReason::Denied => "probe from an address the responder's allow list admits (-B), or ask its operator",
                RejectReason::RateLimited | RejectReason::BudgetExhausted => "try again after the time the responder gave",
                _ => "ask for less (fewer -P streams, a smaller -l), within the responder's limits",
            },
            ProbeError::Auth(_) => "use the same secret file on both ends; a responder without one cannot prove who it is",
            ProbeError::Protocol(_) => "make sure the target port is a pathprobe responder",
            ProbeError::Aborted(_) => "look at the responder's log",
            ProbeError::Io { .. } => "check local resources and permissions",
        }
    }
}

impl ProbeError {
    /// Whether `e` on the control connection means the responder ended
    /// the test (closed or reset the connection): `aborted`, not an I/O
    /// error of this host's.
    pub(crate) fn aborted_by_peer(e: &crate::control::ControlError) -> bool {
        use crate::control::ControlError as C;
        match e {
            C::Closed => true,
            C::Io(e) => peer_reset(e),
            _ => false,
        }
    }
}

/// A connection the peer closed abruptly (RST), as opposed to a local
/// failure.
fn peer_reset(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    )
}

impl From<crate::control::ControlError> for ProbeError {
    fn from(e: crate::control::ControlError) -> Self {
        use crate::control::ControlError as C;
        match e {
            C::Timeout(after) => ProbeError::Timeout {
                stage: "waiting for the responder",
                after,
            },
            C::Closed => ProbeError::Aborted("the responder closed the control connection".into()),
            C::Io(e) if peer_reset(&e) => {
                ProbeError::Aborted(format!("the responder reset the control connection: {e}"))
            }
            C::Io(e) => ProbeError::io("control connection", e),
            C::Frame(e) => ProbeError::Protocol(e.to_string()),
            C::Unauthenticated(e) => ProbeError::Auth(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ProbeError;
    use crate::control::ControlError;
    use std::io::{Error, ErrorKind};

    /// One error of every variant (and every rejection reason). The match
    /// has no wildcard, so a new variant does not compile until it is
    /// listed here, and then the test below asks for its reason in
    /// [`ProbeError::REASONS`].
    fn one_of_each() -> Vec<ProbeError> {
        use crate::protocol::RejectReason as R;
        use std::time::Duration;
        let io = || Error::from(ErrorKind::Other);
        let mut all = vec![
            ProbeError::BadArgument(String::new()),
            ProbeError::Resolve {
                target: String::new(),
                source: io(),
            },
            ProbeError::Refused {
                addr: String::new(),
            },
            ProbeError::Unreachable {
                addr: String::new(),
                source: io(),
            },
            ProbeError::Timeout {
                stage: "",
                after: Duration::ZERO,
            },
            ProbeError::Busy {
                retry_after: Duration::ZERO,
                message: String::new(),
            },
            ProbeError::VersionMismatch(String::new()),
            ProbeError::Auth(String::new()),
            ProbeError::Protocol(String::new()),
            ProbeError::Aborted(String::new()),
            ProbeError::io("", io()),
        ];
        for reason in [
            R::VersionMismatch,
            R::Limit,
            R::BadRequest,
            R::AuthRequired,
            R::AuthFailed,
            R::Denied,
            R::RateLimited,
            R::BudgetExhausted,
            R::Other,
        ] {
            all.push(ProbeError::Rejected {
                reason,
                message: String::new(),
            });
        }
        for e in &all {
            match e {
                ProbeError::BadArgument(_)
                | ProbeError::Resolve { .. }
                | ProbeError::Refused { .. }
                | ProbeError::Unreachable { .. }
                | ProbeError::Timeout { .. }
                | ProbeError::Busy { .. }
                | ProbeError::VersionMismatch(_)
                | ProbeError::Rejected { .. }
                | ProbeError::Auth(_)
                | ProbeError::Protocol(_)
                | ProbeError::Aborted(_)
                | ProbeError::Io { .. } => {}
            }
        }
        all
    }

    #[test]
    fn every_reason_is_listed_and_every_listed_reason_occurs() {
        let seen: std::collections::BTreeSet<_> =
            one_of_each().iter().map(ProbeError::reason).collect();
        let listed: std::collections::BTreeSet<_> = ProbeError::REASONS.iter().copied().collect();
        assert_eq!(seen, listed);
        assert_eq!(
            listed.len(),
            ProbeError::REASONS.len(),
            "a reason listed twice"
        );
    }

    #[test]
    fn a_responder_that_closes_or_resets_the_control_connection_aborted_the_probe() {
        let reason = |e: ControlError| ProbeError::from(e).reason();
        assert_eq!(reason(ControlError::Closed), "aborted");
        assert_eq!(
            reason(ControlError::Io(Error::from(ErrorKind::ConnectionReset))),
            "aborted"
        );
        assert_eq!(
            reason(ControlError::Io(Error::from(ErrorKind::BrokenPipe))),
            "aborted"
        );
        // This host's own failures stay I/O errors.
        assert_eq!(
            reason(ControlError::Io(Error::from(ErrorKind::OutOfMemory))),
            "io_error"
        );
        assert!(!ProbeError::aborted_by_peer(&ControlError::Timeout(
            std::time::Duration::from_secs(1)
        )));
    }
}
