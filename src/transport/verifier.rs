//! The upstream's certificate check: rustls's WebPKI verifier, unchanged, except that an
//! unknown issuer which turns out to be the certificate itself is reported as
//! self-signed, so the error names what an operator has to fix.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, DigitallySignedStruct, Error, OtherError, RootCertStore, SignatureScheme,
};

use super::cause::SelfSigned;

/// WebPKI verification against the configured roots.
#[derive(Debug)]
pub struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    provider: Arc<CryptoProvider>,
}

impl Verifier {
    /// A verifier trusting `roots`.
    pub fn new(roots: RootCertStore, provider: Arc<CryptoProvider>) -> Result<Verifier, Error> {
        Ok(Verifier {
            inner: webpki(roots, &provider)?,
            provider,
        })
    }
}

fn webpki(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, Error> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|e| Error::General(e.to_string()))
}

/// Whether `cert` chains to itself: trusted as its own root, it no longer has an
/// unknown issuer (it may still fail for its name or dates).
fn is_self_signed(
    cert: &CertificateDer<'_>,
    name: &ServerName<'_>,
    now: UnixTime,
    provider: &Arc<CryptoProvider>,
) -> bool {
    let mut roots = RootCertStore::empty();
    if roots.add(cert.clone().into_owned()).is_err() {
        return false;
    }
    let Ok(alone) = webpki(roots, provider) else {
        return false;
    };
    !matches!(
        alone.verify_server_cert(cert, &[], name, &[], now),
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    )
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let verdict = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match verdict {
            Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
                if intermediates.is_empty()
                    && is_self_signed(end_entity, server_name, now, &self.provider) =>
            {
                Err(Error::InvalidCertificate(CertificateError::Other(
                    OtherError(Arc::new(SelfSigned)),
                )))
            }
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }
}
