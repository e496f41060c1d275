//! Where log lines go: a bounded, lossy channel drained into stderr (the
//! daemon) or stdout (the demo) by a thread of its own (tracing-appender's
//! non-blocking writer), so a log reader that stalls or is gone never
//! blocks or stops delivery. It owns the line limit, the count of lines
//! dropped while the channel was full (`/metrics`), the `log_lines_dropped`
//! report once lines are accepted again, the bounded flush at exit, and
//! the text written for a person ([`print_out`], [`print_err`]), which a
//! closed stream loses instead of panicking.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::warn;
use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};

/// Lines the channel holds while its writer is stuck. The daemon's lines
/// are short (a debug run's: median 121 bytes, 99th percentile 163,
/// longest 602), so a full channel costs under 1 MiB with each line's
/// allocation, and 4 MiB even at 1 KiB a line; while the writer keeps up
/// it holds next to nothing. That is a few seconds of a busy debug log
/// (about three lines a delivery), enough to ride out a reader's hiccup;
/// beyond it lines are dropped and counted rather than held without end.
pub const LINES_BUFFERED: usize = 4_096;

/// How long the exit waits for the lines still buffered to be written.
/// A reader that is stuck would otherwise hold the exit for ever.
pub const FLUSH_BOUND: Duration = Duration::from_secs(2);

/// How often dropped lines are looked for and reported.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The log's channel when the log goes to stdout (the demo), so what
/// [`print_out`] writes keeps its place among the log lines.
static STDOUT_LINES: OnceLock<Counted<NonBlocking>> = OnceLock::new();

/// Writes `text` to stdout for a person; a closed stdout loses it
/// (`print!` would panic). Through the log's channel when the log goes to
/// stdout too.
pub fn print_out(text: &str) {
    match STDOUT_LINES.get() {
        Some(lines) => {
            let _ = lines.clone().write_all(text.as_bytes());
        }
        None => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
    }
}

/// Writes `text` to stderr for a person; a closed stderr loses it
/// (`eprint!` would panic).
pub fn print_err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Which standard stream the lines go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The daemon's log.
    Stderr,
    /// The demo's.
    Stdout,
}

/// The writer the subscriber is given, and what its thread needs at exit.
#[derive(Debug)]
pub struct LogOutput {
    writer: NonBlocking,
    guard: WorkerGuard,
    /// Lines handed to the channel (dropped ones included) and lines its
    /// thread has written out: the exit waits for the two to meet.
    sent: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
}

impl LogOutput {
    /// Lines to `stream`, through a channel of [`LINES_BUFFERED`] lines.
    pub fn to(stream: Stream) -> Self {
        let output = Self::with_sink(LossySink::dup(stream), LINES_BUFFERED);
        if stream == Stream::Stdout {
            let _ = STDOUT_LINES.set(output.writer());
        }
        output
    }

    /// Lines to `sink`, through a channel of `lines` lines.
    fn with_sink(sink: impl Write + Send + 'static, lines: usize) -> Self {
        let written = Arc::new(AtomicU64::new(0));
        let sink = Counted {
            inner: sink,
            lines: Arc::clone(&written),
        };
        let (writer, guard) = NonBlockingBuilder::default()
            .lossy(true)
            .buffered_lines_limit(lines)
            .thread_name("log-writer")
            .finish(sink);
        Self {
            writer,
            guard,
            sent: Arc::new(AtomicU64::new(0)),
            written,
        }
    }

    /// The writer for `tracing_subscriber`'s `with_writer`.
    pub fn writer(&self) -> Counted<NonBlocking> {
        Counted {
            inner: self.writer.clone(),
            lines: Arc::clone(&self.sent),
        }
    }

    /// Whether every line handed over was written out or dropped.
    fn drained(&self) -> bool {
        let handed = self.sent.load(Ordering::Relaxed);
        let done = self.written.load(Ordering::Relaxed) + self.dropped().total();
        done >= handed
    }

    /// The count of lines dropped so far.
    pub fn dropped(&self) -> DroppedLines {
        DroppedLines(self.writer.error_counter())
    }

    /// Lets the writer thread write what is buffered, waiting at most
    /// [`FLUSH_BOUND`] in all: first until every line handed over was
    /// written out or dropped (the guard's own drop gives a full channel
    /// only 100 ms, and the stop's last lines are the ones that matter),
    /// then for the guard. Its drop may print to stdout, which blocks on a
    /// stuck pipe and panics on a closed one; so it runs on a thread of
    /// its own, left behind if it does not finish in time (the process is
    /// about to exit).
    pub fn flush_at_exit(self) {
        let until = Instant::now() + FLUSH_BOUND;
        while !self.drained() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (done, finished) = mpsc::channel();
        let guard = self.guard;
        let spawned = std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || {
                drop(guard);
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = finished.recv_timeout(until.saturating_duration_since(Instant::now()));
        }
    }
}

/// A writer that counts the lines (writes) it passes on: on the
/// subscriber's side, the lines handed to the channel; on the thread's
/// side, the lines written out.
#[derive(Debug, Clone)]
pub struct Counted<W> {
    inner: W,
    lines: Arc<AtomicU64>,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.lines.fetch_add(1, Ordering::Relaxed);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Counted<NonBlocking> {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Lines dropped because the channel was full (or its thread gone).
#[derive(Debug, Clone)]
pub struct DroppedLines(ErrorCounter);

impl DroppedLines {
    /// Lines dropped since the start.
    pub fn total(&self) -> u64 {
        u64::try_from(self.0.dropped_lines()).unwrap_or(u64::MAX)
    }

    /// Says, once, how many lines were dropped since `reported` lines had
    /// been; returns the total now reported. A report that is dropped too
    /// reports nothing: the next one covers it, and itself.
    fn report_since(&self, reported: u64) -> u64 {
        let total = self.total();
        if total <= reported {
            return reported;
        }
        warn!(
            event = "log_lines_dropped",
            dropped = total - reported,
            dropped_total = total,
            "log lines were dropped while the log output was not keeping up"
        );
        // The daemon logs from its one runtime thread, this task's: nothing
        // else wrote between the two readings, so a count that moved means
        // this line was dropped.
        if self.total() == total {
            total
        } else {
            reported
        }
    }
}

/// Reports dropped lines (`DroppedLines::report_since`) every second,
/// for ever: the first report after lines were dropped that the channel
/// accepts says how many.
pub async fn report_dropped_lines(dropped: DroppedLines) {
    let mut reported = 0;
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        reported = dropped.report_since(reported);
    }
}

/// A duplicate of the stream's descriptor that swallows write errors: a
/// reader that is gone (EPIPE) loses the line, nothing else happens. A
/// descriptor of its own, not `std::io::stderr()`, so the writer thread
/// holds none of std's locks while a write blocks.
#[derive(Debug)]
struct LossySink(Option<File>);

impl LossySink {
    fn dup(stream: Stream) -> Self {
        let fd = match stream {
            Stream::Stderr => std::io::stderr().as_fd().try_clone_to_owned(),
            Stream::Stdout => std::io::stdout().as_fd().try_clone_to_owned(),
        };
        Self(fd.ok().map(File::from))
    }
}

impl Write for LossySink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Some(file) = self.0.as_mut() {
            let _ = file.write_all(buf);
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Instant;

    use super::*;

    #[derive(Default)]
    struct GateState {
        open: bool,
        /// A write is waiting for the gate.
        held: bool,
        wrote: Vec<u8>,
    }

    /// A sink whose writes wait until it is opened, recording what they
    /// wrote: a log reader that has stalled, then catches up.
    #[derive(Clone, Default)]
    struct Gate(Arc<(Mutex<GateState>, Condvar)>);

    impl Gate {
        fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
            self.0 .0.lock().unwrap_or_else(|e| e.into_inner())
        }

        fn open(&self) {
            self.state().open = true;
            self.0 .1.notify_all();
        }

        /// Waits until the writer thread is stuck in a write.
        fn wait_held(&self) {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut state = self.state();
            while !state.held {
                assert!(Instant::now() < deadline, "the writer never wrote");
                state = self
                    .0
                     .1
                    .wait_timeout(state, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }

        fn text(&self) -> String {
            String::from_utf8_lossy(&self.state().wrote).into_owned()
        }
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut state = self.state();
            state.held = true;
            self.0 .1.notify_all();
            while !state.open {
                state = self.0 .1.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            state.wrote.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn dropped_lines_are_counted_and_reported_once_lines_are_accepted() {
        let gate = Gate::default();
        let output = LogOutput::with_sink(gate.clone(), 2);
        let dropped = output.dropped();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(output.writer())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(event = "filler", n = 0);
            gate.wait_held();
            // Line 0 is held by the stuck writer, two more fit, seven are
            // dropped.
            for n in 1..10 {
                tracing::info!(event = "filler", n);
            }
            assert_eq!(dropped.total(), 7);
            assert_eq!(dropped.report_since(0), 0, "the report was dropped too");
            assert_eq!(dropped.total(), 8);

            gate.open();
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut reported = 0;
            while reported == 0 {
                assert!(Instant::now() < deadline, "no report was ever accepted");
                std::thread::sleep(Duration::from_millis(1));
                reported = dropped.report_since(reported);
            }
            assert_eq!(reported, dropped.total());
            assert_eq!(dropped.report_since(reported), reported, "said once");
        });
        output.flush_at_exit();
        let text = gate.text();
        let reports: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("log_lines_dropped"))
            .collect();
        assert_eq!(reports.len(), 1, "{text}");
        assert!(
            reports[0].contains(&format!("dropped_total={}", dropped.total())),
            "{text}"
        );
        for n in 0..3 {
            assert!(text.contains(&format!("n={n}")), "{text}");
        }
    }

    #[test]
    fn buffered_lines_are_written_at_exit() {
        let gate = Gate::default();
        gate.open();
        let output = LogOutput::with_sink(gate.clone(), 16);
        let mut writer = output.writer();
        for n in 0..10 {
            writer
                .write_all(format!("line {n}\n").as_bytes())
                .expect("never fails");
        }
        output.flush_at_exit();
        assert_eq!(gate.text().lines().count(), 10, "{}", gate.text());
    }

    #[test]
    fn a_write_that_fails_loses_the_line_and_nothing_else() {
        // Opened for reading only: every write fails.
        let unwritable = File::open("/dev/null").expect("open /dev/null");
        assert!((&unwritable).write_all(b"x").is_err());
        for mut sink in [LossySink(Some(unwritable)), LossySink(None)] {
            assert!(sink.write_all(b"lost\n").is_ok());
            assert_eq!(sink.write(b"lost\n").expect("never fails"), 5);
            assert!(sink.flush().is_ok());
        }
    }
}
