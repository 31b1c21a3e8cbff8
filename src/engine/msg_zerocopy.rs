//! A TCP sender that hands the kernel its buffer with `MSG_ZEROCOPY`
//! instead of having it copied on every `send`, and the bookkeeping that
//! goes with it: the kernel's completion notifications, read from the
//! socket's error queue, say when it no longer holds the buffer's pages
//! and whether it had to copy them after all.
//!
//! This is a measurement part, not a product mode: benches/zerocopy_send.rs
//! runs it beside plain `write` and sendfile from a memfd, to choose
//! a TCP sender by measurement. On loopback and veth it lost to `write`
//! and was never ahead
//! (docs/PERFORMANCE.md, "MSG_ZEROCOPY, measured"), so no probe uses it;
//! it lives in the library so that its
//! accounting is tested like the rest of the data path.
//!
//! Why the accounting matters: each `send` that takes bytes gets the next
//! 32-bit notification id, and a notification covers a range of ids
//! (`ee_info..=ee_data`), several sends' worth when the kernel merges
//! them. Until a send's id is covered, its pages are pinned and the
//! buffer must stay alive; notifications not read pile up against the
//! socket's option memory (`net.core.optmem_max`) until `send` fails with
//! `ENOBUFS`. So [`ZeroCopySend`] owns its buffer, reads notifications as
//! it goes, drains them when `ENOBUFS` says so, and [`ZeroCopySend::finish`]
//! waits until every id it was given is covered before the buffer goes.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// `SO_ZEROCOPY` (asm-generic/socket.h); not in the libc crate.
const SO_ZEROCOPY: libc::c_int = 60;
/// `sock_extended_err.ee_origin` of a zerocopy notification
/// (linux/errqueue.h); not in the libc crate.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// Set in `ee_code` when the kernel copied the range's data after all
/// (for instance on delivery to a local socket).
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Sends between two non-blocking reads of the error queue. Reading after
/// every send would add a syscall per send that mostly finds nothing;
/// notifications left queued are merged by the kernel into one range, so
/// a few sends' delay costs neither memory nor correctness.
const DRAIN_EVERY: u64 = 8;

/// Why the `MSG_ZEROCOPY` sender stopped.
#[derive(Debug, thiserror::Error)]
pub enum MsgZeroCopyError {
    #[error("the kernel refused SO_ZEROCOPY: {0}")]
    Enable(#[source] io::Error),
    #[error("send with MSG_ZEROCOPY failed: {0}")]
    Send(#[source] io::Error),
    #[error("reading the error queue failed: {0}")]
    ErrorQueue(#[source] io::Error),
    /// Something other than a zerocopy notification was on the error
    /// queue (an ICMP error, a timestamp): the socket is not only ours.
    #[error(
        "the error queue held errno {errno} from origin {origin}, not a zerocopy notification"
    )]
    NotZeroCopy { errno: u32, origin: u8 },
    /// A notification covered more ids than sends were issued: the
    /// accounting and the kernel disagree.
    #[error("a notification covered {covered} sends, but only {outstanding} were awaiting one")]
    TooManyCompleted { covered: u64, outstanding: u64 },
    #[error("after {after:?}, {missing} of {issued} sends still had no completion")]
    Incomplete {
        after: Duration,
        missing: u64,
        issued: u64,
    },
}

/// What the kernel reported back for the sends issued: the tally of
/// notifications, kept apart from the socket so it can be checked alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completions {
    /// Sends that took bytes, each given the next notification id.
    pub issued: u64,
    /// Ids covered by the notifications read.
    pub completed: u64,
    /// Ids covered by notifications flagged `SO_EE_CODE_ZEROCOPY_COPIED`:
    /// the kernel copied those sends' data after all.
    pub copied: u64,
    /// Notifications read from the error queue (each may cover many ids).
    pub notifications: u64,
    /// Notifications whose range did not start where the previous ended.
    pub out_of_order: u64,
    /// The id the next in-order notification starts at.
    next_id: u32,
}

impl Completions {
    /// Counts one send that took bytes.
    pub fn issue(&mut self) {
        self.issued += 1;
    }

    /// Sends whose completion has not been read yet.
    pub fn outstanding(&self) -> u64 {
        self.issued.saturating_sub(self.completed)
    }

    /// Accounts one error-queue message.
    pub fn record(&mut self, ee: &libc::sock_extended_err) -> Result<(), MsgZeroCopyError> {
        if ee.ee_errno != 0 || ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY {
            return Err(MsgZeroCopyError::NotZeroCopy {
                errno: ee.ee_errno,
                origin: ee.ee_origin,
            });
        }
        // ids are u32 and wrap; a range is at most 2^32 ids long.
        let (lo, hi) = (ee.ee_info, ee.ee_data);
        let covered = u64::from(hi.wrapping_sub(lo)) + 1;
        if covered > self.outstanding() {
            return Err(MsgZeroCopyError::TooManyCompleted {
                covered,
                outstanding: self.outstanding(),
            });
        }
        if lo != self.next_id {
            self.out_of_order += 1;
        }
        self.next_id = hi.wrapping_add(1);
        self.completed += covered;
        if ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
            self.copied += covered;
        }
        self.notifications += 1;
        Ok(())
    }
}

/// What one [`ZeroCopySend`] did, once every completion was read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZeroCopyReport {
    /// Bytes the kernel took.
    pub bytes: u64,
    pub completions: Completions,
    /// `recvmsg(MSG_ERRQUEUE)` calls, including those that found nothing:
    /// part of the cost of the mode.
    pub error_queue_reads: u64,
    /// Sends refused with `ENOBUFS` (option memory full) and retried after
    /// draining the error queue.
    pub enobufs: u64,
}

/// A `MSG_ZEROCOPY` sender on one TCP stream, owning the buffer it sends
/// so that the buffer outlives every send that pinned it.
#[derive(Debug)]
pub struct ZeroCopySend<'a> {
    stream: &'a TcpStream,
    buf: Vec<u8>,
    report: ZeroCopyReport,
}

impl<'a> ZeroCopySend<'a> {
    /// Turns on `SO_ZEROCOPY` for `stream` and takes `payload` as the
    /// buffer every send hands over.
    pub fn new(stream: &'a TcpStream, payload: Vec<u8>) -> Result<Self, MsgZeroCopyError> {
        let one: libc::c_int = 1;
        // SAFETY: the descriptor is open; the option value is a c_int
        // that lives for the call.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_ZEROCOPY,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(MsgZeroCopyError::Enable(io::Error::last_os_error()));
        }
        Ok(ZeroCopySend {
            stream,
            buf: payload,
            report: ZeroCopyReport::default(),
        })
    }

    /// The tally so far.
    pub fn report(&self) -> ZeroCopyReport {
        self.report
    }

    /// Sends the buffer once (from its start, as the payload is filler)
    /// and returns the bytes the kernel took. `ENOBUFS` is handled here:
    /// the error queue is drained, waiting for a notification if need be,
    /// and the send retried.
    pub fn send(&mut self) -> Result<usize, MsgZeroCopyError> {
        loop {
            // SAFETY: `buf` is valid for its length and lives in `self`
            // until every id is covered (`finish`), as MSG_ZEROCOPY needs.
            let n = unsafe {
                libc::send(
                    self.stream.as_raw_fd(),
                    self.buf.as_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_ZEROCOPY,
                )
            };
            if n > 0 {
                self.report.bytes += n as u64;
                self.report.completions.issue();
                if self.report.completions.issued.is_multiple_of(DRAIN_EVERY) {
                    self.drain()?;
                }
                return Ok(n as usize);
            }
            if n == 0 {
                return Ok(0);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOBUFS) if self.report.completions.outstanding() > 0 => {
                    // Option memory is full of pending notifications:
                    // reading them frees it. A second without one means
                    // nothing is being acknowledged; give up rather than
                    // spin.
                    self.report.enobufs += 1;
                    self.wait_for_notification(Duration::from_secs(1))?;
                    if self.drain()? == 0 {
                        return Err(MsgZeroCopyError::Send(err));
                    }
                }
                _ => return Err(MsgZeroCopyError::Send(err)),
            }
        }
    }

    /// Reads every notification queued now, without waiting. Returns how
    /// many messages were read.
    pub fn drain(&mut self) -> Result<u64, MsgZeroCopyError> {
        let mut read = 0;
        while self.read_one()? {
            read += 1;
        }
        Ok(read)
    }

    /// Waits until every send's completion was read, at most `timeout`,
    /// and returns the tally; the buffer is freed only after that.
    pub fn finish(mut self, timeout: Duration) -> Result<ZeroCopyReport, MsgZeroCopyError> {
        let start = Instant::now();
        self.drain()?;
        while self.report.completions.outstanding() > 0 {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(MsgZeroCopyError::Incomplete {
                    after: timeout,
                    missing: self.report.completions.outstanding(),
                    issued: self.report.completions.issued,
                });
            }
            self.wait_for_notification(left)?;
            self.drain()?;
        }
        Ok(self.report)
    }

    /// Blocks until the error queue has something (POLLERR) or `timeout`.
    fn wait_for_notification(&self, timeout: Duration) -> Result<(), MsgZeroCopyError> {
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            // POLLERR is reported whatever is asked; asking for nothing
            // else keeps a writable socket from waking us.
            events: 0,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms.max(1)) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(MsgZeroCopyError::ErrorQueue(err));
            }
        }
        Ok(())
    }

    /// Reads one message from the error queue; false when it was empty.
    fn read_one(&mut self) -> Result<bool, MsgZeroCopyError> {
        // u64s so the control buffer is aligned for cmsghdr.
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data, for which all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        self.report.error_queue_reads += 1;
        // SAFETY: msg points at a control buffer that lives for the call;
        // no data buffers, as notifications carry no data.
        let rc = unsafe {
            libc::recvmsg(
                self.stream.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) => Ok(false),
                Some(libc::EINTR) => Ok(true),
                _ => Err(MsgZeroCopyError::ErrorQueue(err)),
            };
        }
        // SAFETY: recvmsg filled `msg`, whose control buffer lives here.
        for e in unsafe { super::error_queue::extended_errors(&msg) } {
            self.report.completions.record(&e.err)?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Reads `b` until the peer's end of stream, discarding; the bytes read.
    fn discard_to_end(b: &TcpStream) -> u64 {
        let mut got = 0u64;
        loop {
            match crate::engine::zerocopy::discard(b, 1 << 20).unwrap() {
                0 => return got,
                n => got += n as u64,
            }
        }
    }

    fn note(lo: u32, hi: u32, code: u8) -> libc::sock_extended_err {
        libc::sock_extended_err {
            ee_errno: 0,
            ee_origin: SO_EE_ORIGIN_ZEROCOPY,
            ee_type: 0,
            ee_code: code,
            ee_pad: 0,
            ee_info: lo,
            ee_data: hi,
        }
    }

    #[test]
    fn ranges_are_counted_inclusively_and_copied_ones_apart() {
        let mut c = Completions::default();
        for _ in 0..10 {
            c.issue();
        }
        c.record(&note(0, 3, 0)).unwrap();
        c.record(&note(4, 4, SO_EE_CODE_ZEROCOPY_COPIED)).unwrap();
        assert_eq!((c.completed, c.copied, c.outstanding()), (5, 1, 5));
        c.record(&note(5, 9, SO_EE_CODE_ZEROCOPY_COPIED)).unwrap();
        assert_eq!(c.completed, 10);
        assert_eq!(c.copied, 6);
        assert_eq!(c.notifications, 3);
        assert_eq!(c.out_of_order, 0);
        // Nothing is outstanding: one more id would be one never issued.
        assert!(matches!(
            c.record(&note(10, 10, 0)),
            Err(MsgZeroCopyError::TooManyCompleted {
                covered: 1,
                outstanding: 0
            })
        ));
    }

    #[test]
    fn ids_wrap_and_foreign_errors_are_refused() {
        let mut c = Completions {
            issued: 4,
            next_id: u32::MAX - 1,
            ..Completions::default()
        };
        // MAX-1, MAX, 0, 1: four ids across the wrap.
        c.record(&note(u32::MAX - 1, 1, 0)).unwrap();
        assert_eq!((c.completed, c.out_of_order), (4, 0));
        let icmp = libc::sock_extended_err {
            ee_errno: libc::EHOSTUNREACH as u32,
            ee_origin: 2,
            ..note(0, 0, 0)
        };
        assert!(matches!(
            c.record(&icmp),
            Err(MsgZeroCopyError::NotZeroCopy { origin: 2, .. })
        ));
    }

    /// Sends the receiver's window cannot take yet stay unacknowledged, so
    /// their completions come only once it reads: `finish` must wait for
    /// them, not return the tally of what was already queued.
    #[test]
    fn finish_waits_for_completions_still_in_flight() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        // A small receive buffer (inherited by the accepted socket) closes
        // the window after a few sends; a large send buffer keeps every
        // send from blocking.
        socket2::SockRef::from(&l)
            .set_recv_buffer_size(32 * 1024)
            .unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        socket2::SockRef::from(&a)
            .set_send_buffer_size(8 << 20)
            .unwrap();
        let (b, _) = l.accept().unwrap();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let receiver = std::thread::spawn(move || {
            wait.recv().unwrap();
            discard_to_end(&b)
        });
        let mut sender = ZeroCopySend::new(&a, vec![1u8; 64 * 1024]).unwrap();
        let mut took = 0u64;
        for _ in 0..16 {
            took += sender.send().unwrap() as u64;
        }
        sender.drain().unwrap();
        let before = sender.report().completions;
        assert!(
            before.outstanding() > 0,
            "the closed window should hold some sends back: {before:?}"
        );
        go.send(()).unwrap();
        let report = sender.finish(Duration::from_secs(10)).unwrap();
        assert_eq!(report.completions.issued, 16);
        assert_eq!(report.completions.completed, 16, "{report:?}");
        a.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(receiver.join().unwrap(), took);
        assert_eq!(report.bytes, took);
    }

    /// Over a real loopback connection: every byte the sender was told the
    /// kernel took arrives, and every send's completion is read.
    #[test]
    fn every_send_is_received_and_completed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let receiver = std::thread::spawn(move || discard_to_end(&b));
        let mut sender = ZeroCopySend::new(&a, vec![7u8; 64 * 1024]).unwrap();
        let mut took = 0u64;
        let mut sends = 0u64;
        for _ in 0..500 {
            let n = sender.send().unwrap();
            assert!(n > 0);
            took += n as u64;
            sends += 1;
        }
        let report = sender.finish(Duration::from_secs(10)).unwrap();
        a.shutdown(std::net::Shutdown::Write).unwrap();
        let received = receiver.join().unwrap();
        assert_eq!(report.bytes, took);
        assert_eq!(received, took, "the receiver counts what the sender sent");
        assert_eq!(report.completions.issued, sends);
        assert_eq!(report.completions.completed, sends, "{report:?}");
        assert!(report.completions.notifications >= 1);
        assert!(report.completions.notifications <= sends);
        assert!(report.completions.copied <= sends);
        assert!(report.error_queue_reads >= report.completions.notifications);
    }
}
