//! Why a connection to an upstream could not be made, in the few words a client and an
//! operator need (`tls: unknown issuer`, `connect: refused`), read off the error's
//! source chain. Which causes are worth an immediate retry is said here; what to do
//! about it is the proxy's business.

use std::error::Error;
use std::fmt;
use std::io;

use rustls::{AlertDescription, CertificateError};

/// Why an attempt got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no response within {0:?}")]
    Timeout(std::time::Duration),
    #[error("cannot connect: {0}")]
    Connect(ConnectCause),
    #[error("{0}")]
    Failed(Box<dyn Error + Send + Sync>),
}

impl SendError {
    /// Whether the upstream's answer head was larger than hyper reads (more than
    /// 100 header lines, or past the read buffer): the upstream's doing, and the same
    /// on every retry.
    pub fn head_too_large(&self) -> bool {
        let SendError::Failed(error) = self else {
            return false;
        };
        let mut cause: Option<&(dyn Error + 'static)> = Some(error.as_ref());
        while let Some(error) = cause {
            if error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_parse_too_large)
            {
                return true;
            }
            cause = error.source();
        }
        false
    }
}

/// What went wrong while connecting: TCP, DNS, TLS, or a peer that does not speak TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectCause {
    Refused,
    Timeout,
    Reset,
    /// The host name did not resolve.
    Dns(String),
    UnknownIssuer,
    SelfSigned,
    /// The certificate is not valid for this name.
    NameMismatch(String),
    Expired,
    NotYetValid,
    Revoked,
    /// The upstream asked for a client certificate (`client_cert`) and got none it takes.
    ClientCertRejected,
    /// The upstream broke off the handshake with this alert.
    Alert(String),
    /// The peer answered with something that is not TLS: a plaintext port.
    NotTls,
    /// The peer closed the connection in the middle of the handshake.
    ClosedInHandshake,
    /// Any other certificate or TLS failure, in rustls's words.
    Tls(String),
    /// Anything else, in the error's own words.
    Other(String),
}

impl ConnectCause {
    /// Reads the cause off `error` and its sources; `server_name` is the name the
    /// certificate was checked against.
    pub fn of(error: &(dyn Error + 'static), server_name: &str) -> ConnectCause {
        if let Some(cause) = ConnectCause::tls_in(error, server_name) {
            return cause;
        }
        let dns = chain(error).any(|e| e.to_string().starts_with("dns error"));
        let kind = chain(error).find_map(|e| e.downcast_ref::<io::Error>().map(io::Error::kind));
        match kind {
            _ if dns => ConnectCause::Dns(innermost(error)),
            Some(io::ErrorKind::ConnectionRefused) => ConnectCause::Refused,
            Some(io::ErrorKind::TimedOut) => ConnectCause::Timeout,
            Some(io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted) => {
                ConnectCause::Reset
            }
            Some(io::ErrorKind::UnexpectedEof) => ConnectCause::ClosedInHandshake,
            _ => ConnectCause::Other(innermost(error)),
        }
    }

    /// The TLS failure under `error`, if there is one: a client certificate refused
    /// under TLS 1.3 only shows once the request is on its way.
    pub fn tls_in(error: &(dyn Error + 'static), server_name: &str) -> Option<ConnectCause> {
        chain(error)
            .find_map(|e| e.downcast_ref::<rustls::Error>())
            .map(|tls| ConnectCause::of_tls(tls, server_name))
    }

    fn of_tls(error: &rustls::Error, server_name: &str) -> ConnectCause {
        use CertificateError as C;
        match error {
            rustls::Error::InvalidCertificate(why) => match why {
                C::UnknownIssuer => ConnectCause::UnknownIssuer,
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    ConnectCause::NameMismatch(server_name.to_string())
                }
                C::Expired | C::ExpiredContext { .. } => ConnectCause::Expired,
                C::NotValidYet | C::NotValidYetContext { .. } => ConnectCause::NotYetValid,
                C::Revoked => ConnectCause::Revoked,
                C::Other(other) if other.0.downcast_ref::<SelfSigned>().is_some() => {
                    ConnectCause::SelfSigned
                }
                other => ConnectCause::Tls(format!("{other:?}").to_lowercase()),
            },
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
                ConnectCause::NotTls
            }
            rustls::Error::AlertReceived(
                AlertDescription::CertificateRequired
                | AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown,
            ) => ConnectCause::ClientCertRejected,
            rustls::Error::AlertReceived(alert) => {
                ConnectCause::Alert(format!("{alert:?}").to_lowercase())
            }
            other => ConnectCause::Tls(other.to_string()),
        }
    }

    /// Whether retrying at once is pointless: a certificate or a protocol does not
    /// change between two attempts, while a refused or timed-out connect may heal.
    pub fn is_lasting(&self) -> bool {
        !matches!(
            self,
            ConnectCause::Refused
                | ConnectCause::Timeout
                | ConnectCause::Reset
                | ConnectCause::Dns(_)
                | ConnectCause::ClosedInHandshake
                | ConnectCause::Other(_)
        )
    }
}

impl fmt::Display for ConnectCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectCause::Refused => f.write_str("connect: refused"),
            ConnectCause::Timeout => f.write_str("connect: timeout"),
            ConnectCause::Reset => f.write_str("connect: reset by the upstream"),
            ConnectCause::Dns(why) => write!(f, "connect: cannot resolve the host: {why}"),
            ConnectCause::UnknownIssuer => f.write_str("tls: unknown issuer"),
            ConnectCause::SelfSigned => f.write_str("tls: self-signed certificate"),
            ConnectCause::NameMismatch(name) => write!(f, "tls: name mismatch for {name}"),
            ConnectCause::Expired => f.write_str("tls: certificate expired"),
            ConnectCause::NotYetValid => f.write_str("tls: certificate not yet valid"),
            ConnectCause::Revoked => f.write_str("tls: certificate revoked"),
            ConnectCause::ClientCertRejected => {
                f.write_str("tls: the upstream wants a client certificate it trusts")
            }
            ConnectCause::Alert(alert) => write!(f, "tls: the upstream refused: {alert}"),
            ConnectCause::NotTls => f.write_str("protocol: not TLS"),
            ConnectCause::ClosedInHandshake => f.write_str("tls: closed during the handshake"),
            ConnectCause::Tls(why) => write!(f, "tls: {why}"),
            ConnectCause::Other(why) => write!(f, "connect: {why}"),
        }
    }
}

/// Marks an unknown issuer that is the certificate itself (see the client's verifier).
#[derive(Debug)]
pub struct SelfSigned;

impl fmt::Display for SelfSigned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("self-signed certificate")
    }
}

impl Error for SelfSigned {}

/// `error` and what it wraps, down to the first cause; io::Error's source() skips the
/// error it wraps, so its get_ref() is followed instead.
fn chain<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&e: &&'a (dyn Error + 'static)| match e
        .downcast_ref::<io::Error>()
    {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn Error + 'static)),
        None => e.source(),
    })
}

/// The deepest error's words: the one that says what happened.
fn innermost(error: &(dyn Error + 'static)) -> String {
    let mut e = error;
    while let Some(next) = e.source() {
        e = next;
    }
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapped(inner: impl Into<Box<dyn Error + Send + Sync>>) -> io::Error {
        // The shape hyper-rustls gives: io::Error around tokio-rustls's io::Error.
        io::Error::other(io::Error::new(io::ErrorKind::InvalidData, inner))
    }

    #[test]
    fn a_refused_connect_says_so_and_may_heal() {
        let e = io::Error::from(io::ErrorKind::ConnectionRefused);
        let cause = ConnectCause::of(&e, "x");
        assert_eq!(cause.to_string(), "connect: refused");
        assert!(!cause.is_lasting());
        let e = io::Error::from(io::ErrorKind::TimedOut);
        assert_eq!(ConnectCause::of(&e, "x").to_string(), "connect: timeout");
    }

    #[test]
    fn certificate_errors_are_found_under_two_io_errors_and_last() {
        let cases = [
            (CertificateError::UnknownIssuer, "tls: unknown issuer"),
            (CertificateError::Expired, "tls: certificate expired"),
            (
                CertificateError::NotValidForName,
                "tls: name mismatch for db.local",
            ),
        ];
        for (why, text) in cases {
            let e = wrapped(rustls::Error::InvalidCertificate(why));
            let cause = ConnectCause::of(&e, "db.local");
            assert_eq!(cause.to_string(), text);
            assert!(cause.is_lasting());
        }
    }

    #[test]
    fn a_plaintext_answer_is_not_tls() {
        let e = wrapped(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert_eq!(ConnectCause::of(&e, "x"), ConnectCause::NotTls);
    }
}
