//! Maps a failed exchange onto protocol §5's outcome domain, in cURL's terms
//! (PHP stores cURL's error number as `errorCode`).
//!
//! hyper reports failures as nested errors; this module walks the whole
//! source chain, including errors boxed inside `io::Error`, gathers what it
//! finds into [`Facts`], and decides with a fixed precedence. It performs no
//! I/O. The table it implements is in the crate documentation.

use std::error::Error;
use std::io;

use webhook_core::{DeliveryResult, LocalFailure, TransportFailure, UriRefusal};

use crate::connector::{HopError, WriteFailed};

/// Where in the exchange the error surfaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Connecting, sending the request, or waiting for the response head.
    Head,
    /// Reading the response body.
    Body,
}

/// What the error chain says, reduced to what decides the outcome.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The outbound check refused a hop.
    pub(crate) refused: Option<UriRefusal>,
    /// The resolver failed temporarily.
    pub(crate) lookup_failed: bool,
    /// The connect timeout ran out during setup.
    pub(crate) setup_timeout: bool,
    /// hyper-util says the failure came from the connector.
    pub(crate) connect_stage: bool,
    /// The TCP layer (below TLS) failed.
    pub(crate) tcp_failed: bool,
    /// Some I/O error in the chain has kind `TimedOut`.
    pub(crate) io_timed_out: bool,
    /// A rustls error is in the chain.
    pub(crate) tls: bool,
    /// A write to the connection failed.
    pub(crate) write_failed: bool,
    /// The response was not valid HTTP.
    pub(crate) parse: bool,
    /// The connection closed before the message was complete.
    pub(crate) incomplete: bool,
    /// An I/O error in the chain says this host ran out of descriptors or
    /// memory.
    pub(crate) local: Option<LocalFailure>,
    /// The egress proxy failed the connection.
    pub(crate) proxy: Option<webhook_core::ProxyFailure>,
}

/// Linux's errno values for this host running out of something: EMFILE,
/// ENFILE (descriptors), ENOMEM, ENOBUFS (socket memory). Numbers, not
/// `io::ErrorKind`s: std has no stable kinds for them.
fn local_failure(err: &io::Error) -> Option<LocalFailure> {
    match err.raw_os_error()? {
        23 | 24 => Some(LocalFailure::Descriptors),
        12 | 105 => Some(LocalFailure::Memory),
        _ => None,
    }
}

impl Facts {
    /// Walks `err` and everything it wraps.
    pub(crate) fn gather(err: &(dyn Error + 'static)) -> Self {
        let mut facts = Self::default();
        walk(err, &mut |cause| facts.note(cause));
        facts
    }

    fn note(&mut self, cause: &(dyn Error + 'static)) {
        if let Some(hop) = cause.downcast_ref::<HopError>() {
            match hop {
                HopError::Refused(why) => {
                    self.refused.get_or_insert_with(|| why.clone());
                }
                HopError::Lookup(_) => self.lookup_failed = true,
                HopError::Tcp(_) => self.tcp_failed = true,
                HopError::SetupTimeout => self.setup_timeout = true,
                HopError::Proxy(why) => {
                    self.proxy.get_or_insert(*why);
                }
            }
        } else if let Some(io) = cause.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::TimedOut {
                self.io_timed_out = true;
            }
            if let Some(local) = local_failure(io) {
                self.local.get_or_insert(local);
            }
        } else if cause.is::<rustls::Error>() {
            self.tls = true;
        } else if cause.is::<WriteFailed>() {
            self.write_failed = true;
        } else if let Some(hyper) = cause.downcast_ref::<hyper::Error>() {
            self.parse |= hyper.is_parse();
            self.incomplete |= hyper.is_incomplete_message();
            self.io_timed_out |= hyper.is_timeout();
        } else if let Some(client) = cause.downcast_ref::<hyper_util::client::legacy::Error>() {
            self.connect_stage |= client.is_connect();
        }
    }

    /// The outcome, by precedence: a refusal, then the egress proxy's
    /// failure (this side's, not the receiver's), then name lookup, then the
    /// connection setup (this host out of descriptors or memory, timeout,
    /// TCP, else TLS), then send, protocol, empty reply, and finally
    /// receive.
    pub(crate) fn decide(&self, stage: Stage) -> DeliveryResult {
        use TransportFailure as F;
        if let Some(why) = &self.refused {
            return DeliveryResult::Refused(why.clone());
        }
        if let Some(why) = self.proxy {
            return DeliveryResult::Local(LocalFailure::Proxy(why));
        }
        if self.lookup_failed {
            return DeliveryResult::Failed(F::Resolve);
        }
        if self.setup_timeout {
            // cURL reports its own connect timeout as 28, like any timeout.
            return DeliveryResult::Timeout;
        }
        if self.tcp_failed {
            if let Some(local) = self.local {
                // socket() or connect() failed for want of descriptors or
                // memory: no packet left this host, so it is not the
                // receiver refusing (cURL would say 7, and a `retry=never`
                // row would fail for good over our own shortage).
                return DeliveryResult::Local(local);
            }
            return if self.io_timed_out {
                DeliveryResult::Timeout
            } else {
                DeliveryResult::Failed(F::Connect)
            };
        }
        if self.connect_stage || self.tls {
            // The connector failed above TCP: the TLS handshake, including
            // a peer that hangs up mid-handshake (cURL: 35).
            return DeliveryResult::Failed(F::Tls);
        }
        if self.write_failed {
            return DeliveryResult::Failed(F::Send);
        }
        if self.parse {
            return DeliveryResult::Failed(F::Protocol);
        }
        if self.incomplete && stage == Stage::Head {
            // Closed before a response head: cURL's "Empty reply from
            // server". Once the head is in, a short body is a receive error.
            return DeliveryResult::Failed(F::EmptyReply);
        }
        if self.io_timed_out {
            return DeliveryResult::Timeout;
        }
        DeliveryResult::Failed(F::Receive)
    }
}

/// Classifies an error from sending a request or reading its body.
pub(crate) fn classify(err: &(dyn Error + 'static), stage: Stage) -> DeliveryResult {
    Facts::gather(err).decide(stage)
}

/// Visits `err` and its causes. `io::Error::source` skips the error it
/// wraps (it returns that error's source), so wrapped errors are visited
/// explicitly.
fn walk(err: &(dyn Error + 'static), visit: &mut dyn FnMut(&(dyn Error + 'static))) {
    let mut current = Some(err);
    while let Some(cause) = current {
        visit(cause);
        if let Some(inner) = cause
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
        {
            walk(inner, visit);
            return;
        }
        current = cause.source();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    use TransportFailure as F;

    fn boxed(err: impl Error + Send + Sync + 'static) -> Box<dyn Error + Send + Sync> {
        Box::new(err)
    }

    #[test]
    fn refusal_wins_even_when_wrapped_in_a_tcp_error() {
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let err = HopError::Tcp(boxed(io::Error::other(HopError::Refused(
            UriRefusal::DeniedAddress(ip),
        ))));
        assert_eq!(
            classify(&err, Stage::Head),
            DeliveryResult::Refused(UriRefusal::DeniedAddress(ip))
        );
    }

    #[test]
    fn lookup_failure_is_resolve() {
        let err = HopError::Tcp(boxed(HopError::Lookup("SERVFAIL".into())));
        assert_eq!(
            classify(&err, Stage::Head),
            DeliveryResult::Failed(F::Resolve)
        );
    }

    #[test]
    fn tcp_failures_are_connect_or_timeout() {
        let refused = HopError::Tcp(boxed(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(
            classify(&refused, Stage::Head),
            DeliveryResult::Failed(F::Connect)
        );
        let timed_out = HopError::Tcp(boxed(io::Error::new(
            io::ErrorKind::TimedOut,
            "connect timeout",
        )));
        assert_eq!(classify(&timed_out, Stage::Head), DeliveryResult::Timeout);
        assert_eq!(
            classify(&HopError::SetupTimeout, Stage::Head),
            DeliveryResult::Timeout
        );
    }

    #[test]
    fn running_out_of_descriptors_or_memory_on_connect_is_local() {
        for (errno, local) in [
            (24, LocalFailure::Descriptors),
            (23, LocalFailure::Descriptors),
            (12, LocalFailure::Memory),
            (105, LocalFailure::Memory),
        ] {
            // As hyper-util's connector reports socket() failing: the
            // io::Error is the source of its own error type.
            let err = HopError::Tcp(boxed(io::Error::other(io::Error::from_raw_os_error(errno))));
            assert_eq!(
                classify(&err, Stage::Head),
                DeliveryResult::Local(local),
                "errno {errno}"
            );
        }
        // Another errno on connect stays a connect failure.
        let unreachable = HopError::Tcp(boxed(io::Error::from_raw_os_error(101)));
        assert_eq!(
            classify(&unreachable, Stage::Head),
            DeliveryResult::Failed(F::Connect)
        );
        // The outbound check still comes first.
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let facts = Facts {
            refused: Some(UriRefusal::DeniedAddress(ip)),
            tcp_failed: true,
            local: Some(LocalFailure::Descriptors),
            ..Facts::default()
        };
        assert!(matches!(
            facts.decide(Stage::Head),
            DeliveryResult::Refused(_)
        ));
        // Past the connect, the same errno is not ours to claim: what the
        // receiver got is unknown, so it stays a receive failure.
        let later = io::Error::from_raw_os_error(105);
        assert_eq!(
            classify(&later, Stage::Body),
            DeliveryResult::Failed(F::Receive)
        );
    }

    #[test]
    fn rustls_errors_are_found_inside_nested_io_errors() {
        // hyper-rustls wraps tokio-rustls's io::Error in another io::Error.
        let err = io::Error::other(io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        let facts = Facts::gather(&err);
        assert!(facts.tls);
        assert_eq!(facts.decide(Stage::Head), DeliveryResult::Failed(F::Tls));
    }

    #[test]
    fn connect_stage_above_tcp_is_tls() {
        let facts = Facts {
            connect_stage: true,
            ..Facts::default()
        };
        assert_eq!(facts.decide(Stage::Head), DeliveryResult::Failed(F::Tls));
    }

    #[test]
    fn write_failures_are_send() {
        let err = io::Error::new(
            io::ErrorKind::BrokenPipe,
            WriteFailed(io::Error::from(io::ErrorKind::BrokenPipe)),
        );
        assert_eq!(classify(&err, Stage::Head), DeliveryResult::Failed(F::Send));
    }

    #[test]
    fn incomplete_is_empty_reply_only_before_the_head() {
        let facts = Facts {
            incomplete: true,
            ..Facts::default()
        };
        assert_eq!(
            facts.decide(Stage::Head),
            DeliveryResult::Failed(F::EmptyReply)
        );
        assert_eq!(
            facts.decide(Stage::Body),
            DeliveryResult::Failed(F::Receive)
        );
    }

    #[test]
    fn parse_is_protocol_and_anything_else_is_receive() {
        let parse = Facts {
            parse: true,
            ..Facts::default()
        };
        assert_eq!(
            parse.decide(Stage::Head),
            DeliveryResult::Failed(F::Protocol)
        );
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(
            classify(&reset, Stage::Head),
            DeliveryResult::Failed(F::Receive)
        );
        assert_eq!(
            classify(&reset, Stage::Body),
            DeliveryResult::Failed(F::Receive)
        );
    }
}
