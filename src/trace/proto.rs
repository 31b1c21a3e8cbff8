//! The transport a trace uses, apart from the tracer so that the socket
//! code and the runner can both name it without importing each other.

use serde::{Deserialize, Serialize};

/// The transport a trace's packets use: the probe's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}
