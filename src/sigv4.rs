//! SigV4 re-signing: with `[upstream.sigv4]` the client's own signature is
//! removed and every attempt, retries included, is signed afresh for the upstream's
//! host with the pod's credentials, using the AWS SDK's signer (`aws-sigv4`).
//!
//! A signature covers the body's SHA-256, so a body is held in memory to be signed;
//! `proxy/service.rs` reads it up to [`SIGNED_BODY_LIMIT`]. Only S3 accepts
//! `UNSIGNED-PAYLOAD`, for a body too large to hold. Credentials come from
//! `credentials.rs`; the signing time from the [`Clock`] given.

pub mod credentials;

use std::borrow::Cow;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use http::{HeaderMap, Request};

pub use credentials::{Credentials, CredentialsError};

use crate::clock::Clock;
use crate::config::SigV4Settings;
use crate::transport::ProxyBody;

/// The largest body held to be hashed and signed: DynamoDB's largest request
/// (`BatchWriteItem`, 16 MB). A larger one gets 413, except for S3.
pub const SIGNED_BODY_LIMIT: u64 = 16 * 1024 * 1024;

/// The client's signature, removed before easeoff signs.
const CLIENT_SIGNATURE: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Headers left out of SignedHeaders: what the AWS SDKs' signers leave out, so a
/// signature checker sees what it would from the SDK itself. This is the JavaScript
/// SDK's list (`ALWAYS_UNSIGNABLE_HEADERS`), which contains botocore's
/// (`SIGNED_HEADERS_BLACKLIST`: expect, transfer-encoding, user-agent,
/// x-amzn-trace-id) and aws-sigv4's defaults (authorization, user-agent,
/// x-amzn-trace-id, transfer-encoding). Proxies and the client's HTTP stack change
/// them in transit; `expect: 100-continue` above all, which S3 uploads send.
const UNSIGNED_HEADERS: [&str; 15] = [
    "authorization",
    "cache-control",
    "connection",
    "expect",
    "from",
    "keep-alive",
    "max-forwards",
    "pragma",
    "referer",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "x-amzn-trace-id",
];
/// Prefixes the JavaScript SDK never signs either (proxy and browser headers).
const UNSIGNED_PREFIXES: [&str; 2] = ["proxy-", "sec-"];

const CONTENT_SHA256: &str = "x-amz-content-sha256";
/// S3's aws-chunked upload without chunk signatures: re-signable as is.
const STREAMING_UNSIGNED: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// Why an attempt could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("cannot sign the request: {0}")]
    Credentials(#[from] CredentialsError),
    #[error("cannot sign the request: {0}")]
    Signing(String),
    #[error(
        "the request body must be held to be signed for {0}, and it is larger than easeoff holds"
    )]
    BodyNotHeld(String),
}

/// Why a client's request cannot be re-signed at all.
#[derive(Debug, thiserror::Error)]
#[error(
    "chunk-signed uploads (x-amz-content-sha256: {0}) cannot be re-signed: their chunks carry the client's signature; disable chunked signing in the client"
)]
pub struct Unsignable(String);

/// Where signing upstreams get their credentials and their clock: the AWS default
/// chain and tokio's clock unless a test sets them.
#[derive(Clone, Default)]
pub struct SigningEnv {
    pub credentials: Option<SharedCredentialsProvider>,
    pub clock: Option<Clock>,
}

impl std::fmt::Debug for SigningEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningEnv")
            .field("credentials", &self.credentials.is_some())
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl SigningEnv {
    /// A signer for `settings` whose credentials were found once (the start-up probe).
    pub async fn signer(&self, settings: &SigV4Settings) -> Result<Signer, CredentialsError> {
        let credentials = match &self.credentials {
            Some(provider) => Credentials::from_provider(provider.clone())?,
            None => Credentials::default_chain(&settings.region).await?,
        };
        credentials.probe().await?;
        let clock = self.clock.clone().unwrap_or_default();
        Ok(Signer::new(settings, credentials, clock))
    }
}

/// Signs attempts for one upstream.
pub struct Signer {
    service: String,
    region: String,
    /// S3's rules: `UNSIGNED-PAYLOAD` allowed, `x-amz-content-sha256` sent, the path
    /// signed as sent.
    s3: bool,
    /// The service's signing rules, built once.
    settings: SigningSettings,
    credentials: Credentials,
    /// Its wall time is the time a signature is made for.
    clock: Clock,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("service", &self.service)
            .field("region", &self.region)
            .finish()
    }
}

impl Signer {
    /// A signer for `settings` with these credentials and clock.
    pub fn new(settings: &SigV4Settings, credentials: Credentials, clock: Clock) -> Signer {
        let s3 = matches!(
            settings.service.as_str(),
            "s3" | "s3-object-lambda" | "s3express"
        );
        let mut signing = SigningSettings::default();
        signing.excluded_headers = Some(UNSIGNED_HEADERS.map(Cow::Borrowed).to_vec());
        if s3 {
            // What the S3 SDKs do: the hash goes in a header, the path is signed as sent.
            signing.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
            signing.percent_encoding_mode = PercentEncodingMode::Single;
            signing.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        }
        Signer {
            s3,
            settings: signing,
            service: settings.service.clone(),
            region: settings.region.clone(),
            credentials,
            clock,
        }
    }

    /// Whether a body must be held to be signed (every service but S3).
    pub fn needs_body(&self) -> bool {
        !self.s3
    }

    /// Removes the client's signature from a request head. S3's unsigned aws-chunked
    /// marker is kept (it says how the body is framed); a chunk-signed upload cannot
    /// be re-signed.
    pub fn strip(&self, headers: &mut HeaderMap) -> Result<(), Unsignable> {
        let kept = match headers.get(CONTENT_SHA256) {
            Some(v) if v.as_bytes().starts_with(b"STREAMING-") => {
                if self.s3 && v == STREAMING_UNSIGNED {
                    Some(v.clone())
                } else {
                    return Err(Unsignable(String::from_utf8_lossy(v.as_bytes()).into()));
                }
            }
            _ => None,
        };
        for name in CLIENT_SIGNATURE {
            headers.remove(name);
        }
        if let Some(kept) = kept {
            headers.insert(CONTENT_SHA256, kept);
        }
        Ok(())
    }

    /// Signs one attempt in place: `Authorization`, `X-Amz-Date`, and the session
    /// token when the credentials have one, for the clock's current time.
    pub async fn sign(&self, request: &mut Request<ProxyBody>) -> Result<(), SignError> {
        let identity = self.credentials.resolve().await?;
        let precomputed = request
            .headers()
            .get(CONTENT_SHA256)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = match (precomputed, request.body()) {
            (Some(marker), _) => SignableBody::Precomputed(marker),
            (None, ProxyBody::Full { data, .. }) => {
                SignableBody::Bytes(data.as_deref().unwrap_or_default())
            }
            (None, _) if self.s3 => SignableBody::UnsignedPayload,
            (None, _) => return Err(SignError::BodyNotHeld(self.service.clone())),
        };
        let mut settings = self.settings.clone();
        let prefixed = request.headers().keys().filter(|name| {
            UNSIGNED_PREFIXES
                .iter()
                .any(|prefix| name.as_str().starts_with(prefix))
        });
        for name in prefixed {
            if let Some(excluded) = settings.excluded_headers.as_mut() {
                excluded.push(Cow::Owned(name.as_str().to_string()));
            }
        }
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(&self.service)
            .time(self.clock.wall())
            .settings(settings)
            .build()
            .map_err(|e| SignError::Signing(e.to_string()))?
            .into();
        // A plain-http upstream's target is the path alone, and then the signature
        // names the Host header, which aws-sigv4 requires (it panics without one).
        let has_host = request
            .headers()
            .get(http::header::HOST)
            .is_some_and(|host| host.to_str().is_ok());
        if request.uri().authority().is_none() && !has_host {
            return Err(SignError::Signing(
                "the request has no Host header of plain text to sign".into(),
            ));
        }
        let uri = request.uri().to_string();
        let headers = request
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new(request.method().as_str(), uri, headers, body)
            .map_err(|e| SignError::Signing(e.to_string()))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| SignError::Signing(e.to_string()))?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
