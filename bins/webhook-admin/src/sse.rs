//! A Server-Sent Events parser, as the HTML standard's "event stream
//! interpretation" describes it: bytes in any chunking, lines ended by CR,
//! LF or CRLF (even split across chunks), comments, `event:`, `data:`
//! (several lines joined by `\n`), `id:` (kept until changed), `retry:`
//! and unknown fields ignored, a leading byte order mark dropped.
//!
//! It only parses: no I/O, no reconnection.

/// One dispatched message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `event:`; `message` when the message named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The last `id:` seen in the stream so far, if any.
    pub id: Option<String>,
}

/// Incremental parser state.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF belongs to it.
    after_cr: bool,
    /// Whether the first bytes (and a possible BOM) were seen.
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    last_id: Option<String>,
}

impl Parser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes; returns the messages they completed.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<Message> {
        let mut out = Vec::new();
        if bytes.is_empty() {
            return out;
        }
        if !self.started {
            self.line.extend_from_slice(bytes);
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                // Not enough bytes yet to tell.
                return out;
            }
            self.started = true;
            let buffered = std::mem::take(&mut self.line);
            let rest = buffered.strip_prefix(BOM).unwrap_or(&buffered);
            out.extend(self.feed_lines(rest));
            return out;
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        out.extend(self.feed_lines(bytes));
        out
    }

    fn feed_lines(&mut self, bytes: &[u8]) -> Vec<Message> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            let line = std::mem::take(&mut self.line);
            if let Some(message) = self.line_done(&line) {
                out.push(message);
            }
            let crlf = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if crlf {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.line.extend_from_slice(rest);
        out
    }

    /// Interprets one complete line.
    fn line_done(&mut self, line: &[u8]) -> Option<Message> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(b":") {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            // `retry` sets a reconnection delay; this parser does not reconnect.
            _ => {}
        }
        None
    }

    /// A blank line: the message so far, if it has data.
    fn dispatch(&mut self) -> Option<Message> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(Message {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(event: &str, data: &str, id: Option<&str>) -> Message {
        Message {
            event: event.to_owned(),
            data: data.to_owned(),
            id: id.map(str::to_owned),
        }
    }

    fn parse_all(text: &[u8]) -> Vec<Message> {
        Parser::new().feed(text)
    }

    #[test]
    fn fields_comments_and_multi_line_data() {
        let text = b": connected\n\n\
            event: delivered\nid: 1\ndata: {\"a\":1}\n\n\
            : keep-alive\n\n\
            data: first\ndata:second\ndata\nretry: 10\nx-unknown: y\n\n\
            event: empty\n\n\
            id: 7\nevent: dropped\ndata: {}\n\n";
        assert_eq!(
            parse_all(text),
            vec![
                message("delivered", "{\"a\":1}", Some("1")),
                // No `event:` is "message"; the id stays until changed.
                message("message", "first\nsecond\n", Some("1")),
                message("dropped", "{}", Some("7")),
            ]
        );
    }

    #[test]
    fn any_chunking_and_any_line_ending_give_the_same_messages() {
        let lf: &[u8] = "event: a\nid: 3\ndata: é1\ndata: 2\n\ndata: x\n\n".as_bytes();
        let crlf = String::from_utf8_lossy(lf).replace('\n', "\r\n");
        let cr = String::from_utf8_lossy(lf).replace('\n', "\r");
        let want = vec![
            message("a", "é1\n2", Some("3")),
            message("message", "x", Some("3")),
        ];
        for text in [lf.to_vec(), crlf.into_bytes(), cr.into_bytes()] {
            assert_eq!(parse_all(&text), want, "{text:?}");
            // Every split point, one byte at a time, and in two pieces.
            let mut parser = Parser::new();
            let mut got = Vec::new();
            for byte in &text {
                got.extend(parser.feed(std::slice::from_ref(byte)));
            }
            assert_eq!(got, want, "byte by byte: {text:?}");
            for split in 0..=text.len() {
                let mut parser = Parser::new();
                let mut got = parser.feed(&text[..split]);
                got.extend(parser.feed(&text[split..]));
                assert_eq!(got, want, "split at {split}: {text:?}");
            }
        }
    }

    #[test]
    fn a_leading_byte_order_mark_is_dropped_once() {
        let mut parser = Parser::new();
        let mut got = parser.feed(b"\xEF");
        got.extend(parser.feed(b"\xBB\xBFdata: x\n\n\xEF\xBB\xBFdata: y\n\n"));
        assert_eq!(got[0], message("message", "x", None));
        // Only at the start: later it is part of a field name.
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn an_unfinished_message_is_not_dispatched() {
        let mut parser = Parser::new();
        assert!(parser.feed(b"event: a\ndata: 1\n").is_empty());
        assert_eq!(parser.feed(b"\n"), vec![message("a", "1", None)]);
        assert!(parser.feed(b"data: no blank line").is_empty());
    }
}
