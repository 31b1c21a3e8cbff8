//! A data "socket" made of many connections, one per transaction: what a
//! stream runs on when its kind opens a connection for each exchange (the
//! prober dials, the responder's accept loop hands them over). The data
//! path carries it as [`super::datapath::DataSocket::Connections`].

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use super::tcp_socket::TcpOptions;

/// How the prober reaches the responder for every transaction.
#[derive(Debug, Clone)]
pub struct Dialer {
    pub addr: SocketAddr,
    /// Local address to connect from, as the control connection.
    pub bind: Option<IpAddr>,
    /// The test's token, named in every connection's `DataHello`.
    pub token: String,
    pub options: TcpOptions,
    /// Connections per second to stay within: the responder's announced
    /// `max_connections_per_second`; 0 for none.
    pub rate_limit: u32,
}

/// A connection the responder's accept loop hands to a `tcp_crr` test,
/// its `DataHello` read.
#[derive(Debug)]
pub enum Arrival {
    /// One transaction: the request follows the hello.
    Transaction(TcpStream),
    /// The prober's last connection: its transactions are over.
    End(TcpStream),
}

impl Arrival {
    pub fn into_stream(self) -> TcpStream {
        match self {
            Arrival::Transaction(s) | Arrival::End(s) => s,
        }
    }
}

/// The responder's end of a `tcp_crr` test's connections.
#[derive(Debug)]
pub struct Arrivals {
    /// In a mutex only so that a side's sockets can be shared across an
    /// await (a receiver is not `Sync`); the data thread takes it once.
    pub rx: Mutex<Receiver<Arrival>>,
    pub options: TcpOptions,
    /// Connections of this test its door turned away, as the door counts
    /// them.
    pub over_limit: Arc<AtomicU64>,
}

/// What a `tcp_crr` stream runs on instead of one socket: the connections
/// it makes (prober) or is handed (responder).
#[derive(Debug)]
pub enum Connections {
    Dial(Dialer),
    Accepted(Arrivals),
}
