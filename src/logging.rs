//! What every log line passes through on its way to stderr: control
//! characters a peer put in a field (a newline in an iperf3 congestion
//! name or a hello's `software` string) are escaped, whatever the format,
//! so that no peer can start a log line of its own.
//!
//! The fmt layer formats each event into one buffer and writes it with one
//! call, ending in the line's own newline; [`EscapingWriter`] escapes every
//! control character before that last newline. logfmt and JSON escape
//! their values already; this holds for the plain format too, and for any
//! field a formatter would print raw.

use std::io::{self, Write};

/// A writer that escapes control characters inside each line it is given
/// (`\n` as `\\n`, `\r` as `\\r`, `\t` kept, any other as `\\u{..}`),
/// keeping one trailing newline.
pub struct EscapingWriter<W: Write> {
    inner: W,
}

impl<W: Write> EscapingWriter<W> {
    pub fn new(inner: W) -> Self {
        EscapingWriter { inner }
    }
}

/// `line` with its control characters escaped, its trailing newline kept.
pub fn escape_line(line: &[u8]) -> Vec<u8> {
    let (body, end): (&[u8], &[u8]) = match line.strip_suffix(b"\n") {
        Some(b) => (b, b"\n"),
        None => (line, b""),
    };
    let text = String::from_utf8_lossy(body);
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(end);
    bytes
}

impl<W: Write> Write for EscapingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Whole, so that a line is never split between two writes.
        self.inner.write_all(&escape_line(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Stderr behind an [`EscapingWriter`], for `with_writer`.
pub fn escaping_stderr() -> EscapingWriter<io::Stderr> {
    EscapingWriter::new(io::stderr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_inside_a_line_cannot_start_another() {
        let forged = b"level=info msg=\"hello\" software=x\nlevel=error msg=FORGED\r\x1b[2J\n";
        let out = escape_line(forged);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert!(text.ends_with('\n'));
        assert!(
            text.contains("x\\nlevel=error msg=FORGED\\r\\u{1b}[2J"),
            "{text:?}"
        );
        // An honest line is as it was.
        assert_eq!(escape_line(b"a=1\tb=2\n"), b"a=1\tb=2\n");
    }
}
