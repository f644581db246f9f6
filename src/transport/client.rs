//! The pooled client to one upstream: TLS and ALPN, the rewritten request target and
//! Host, and the per-attempt timeout. Classification and pacing are not its business.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::request::Parts;
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{HeaderValue, Request, Response, Version};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::RootCertStore;
use rustls::pki_types::ServerName;

use super::body::ProxyBody;
use super::cause::ConnectCause;
use super::headers::strip_hop_by_hop;
use super::plain::{Bound, Plain};
use super::verifier::Verifier;
use crate::config::{self, UpstreamSettings};
use crate::throttle::Preset;

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot load CA certificates from \"{path}\": {reason}")]
    CaFile { path: String, reason: String },
    #[error("no trusted root certificates: the system store is empty and none were bundled")]
    NoRoots,
    #[error("tls setup: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client_key: {0}")]
    ClientIdentity(String),
    #[error("invalid server_name \"{0}\"")]
    ServerName(String),
}

/// Why an attempt got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("no response within {0:?}")]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(ConnectCause),
    #[error("{0}")]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl SendError {
    /// Whether the upstream's answer head was larger than hyper reads (more than
    /// 100 header lines, or past the read buffer): the upstream's doing, and the same
    /// on every retry.
    pub fn head_too_large(&self) -> bool {
        let SendError::Failed(error) = self else {
            return false;
        };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error.as_ref());
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

type Pooled = Client<HttpsConnector<HttpConnector>, ProxyBody>;

thread_local! {
    /// The per-core runtime this thread runs, plus one; 0 on every other thread.
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// How many per-core runtimes `runtime = "per-core"` starts: one per CPU.
pub fn worker_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Marks the calling thread as per-core runtime `index`: its requests use a
/// connection pool of their own, whose connections live on that runtime.
pub fn set_worker(index: usize) {
    WORKER.with(|w| w.set(index + 1));
}

/// Sends requests to one upstream.
pub struct UpstreamClient {
    /// Slot 0 serves the shared runtime; slot `i + 1` per-core runtime `i`, made on
    /// its first request there. A pool shared across runtimes would hand a
    /// connection driven by one thread to a request on another.
    clients: Box<[OnceLock<Pooled>]>,
    /// A plain-http upstream's connections, kept without hyper-util's pool; `None`
    /// for https and gRPC, which go through `clients`.
    plain: Option<Plain>,
    builder: hyper_util::client::legacy::Builder,
    connector: HttpsConnector<HttpConnector>,
    scheme: Scheme,
    authority: Authority,
    base_path: String,
    host: HeaderValue,
    preserve_host: bool,
    version: Version,
    request_timeout: Duration,
    /// The name the upstream's certificate is checked against, for error messages.
    server_name: String,
}

impl UpstreamClient {
    /// A client with its own connection pool.
    pub fn new(settings: &UpstreamSettings) -> Result<UpstreamClient, ClientError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        // gRPC's rule: every connection attempt gets at least min_connect_timeout.
        let connect_timeout = settings
            .connect_timeout
            .max(settings.connect_backoff.min_connect_timeout);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_keepalive(Some(Duration::from_secs(60)));

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = roots(settings)?;
        let tls = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()?;
        // A plain-http upstream has no roots, and never checks a certificate.
        let tls = if roots.is_empty() {
            tls.with_root_certificates(roots)
        } else {
            let verifier = Verifier::new(roots, provider)?;
            tls.dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        };
        let tls = match (&settings.client_cert, &settings.client_key) {
            (Some(cert), Some(key)) => {
                let (chain, key) =
                    config::client_identity(cert, key).map_err(ClientError::ClientIdentity)?;
                tls.with_client_auth_cert(chain, key)?
            }
            _ => tls.with_no_client_auth(),
        };
        let server_name = match &settings.server_name {
            Some(name) => name.clone(),
            None => settings.url.authority.host().to_string(),
        };
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let https = match &settings.server_name {
            Some(name) => {
                let name = ServerName::try_from(name.clone())
                    .map_err(|_| ClientError::ServerName(name.clone()))?;
                https.with_server_name_resolver(FixedServerNameResolver::new(name))
            }
            None => https,
        };
        // gRPC needs HTTP/2: h2 by ALPN over TLS, prior knowledge over plain http.
        let grpc = settings.preset == Preset::Grpc;
        let http_connector = http.clone();
        let connector = if grpc {
            https.enable_http2().wrap_connector(http)
        } else {
            https.enable_all_versions().wrap_connector(http)
        };
        // Per-core runtimes each have a pool: the cap is shared out among them.
        let per_pool = settings.pool.max_idle.div_ceil(worker_count());
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(settings.pool.idle_timeout)
            .pool_max_idle_per_host(per_pool)
            .http2_only(grpc)
            .set_host(false);
        let clients: Box<[OnceLock<Pooled>]> =
            (0..=worker_count()).map(|_| OnceLock::new()).collect();
        let plain = (settings.url.scheme == Scheme::HTTP && !grpc)
            .then(|| plain(settings, http_connector, per_pool, &server_name))
            .flatten();
        if plain.is_none() {
            let _ = clients[0].set(builder.build(connector.clone()));
        }

        let url = &settings.url;
        Ok(UpstreamClient {
            clients,
            plain,
            builder,
            connector,
            scheme: url.scheme.clone(),
            host: HeaderValue::from_str(url.authority.as_str())
                .unwrap_or_else(|_| HeaderValue::from_static("localhost")),
            authority: url.authority.clone(),
            base_path: url.base_path.clone(),
            preserve_host: settings.preserve_host,
            version: if grpc {
                Version::HTTP_2
            } else {
                Version::HTTP_11
            },
            request_timeout: settings.request_timeout,
            server_name,
        })
    }

    /// Points a client's request head at the upstream: target, Host, hop-by-hop headers.
    pub fn rewrite(&self, req: &mut Parts) {
        let path = std::mem::take(&mut req.uri)
            .into_parts()
            .path_and_query
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let path = if self.base_path.is_empty() {
            path
        } else {
            PathAndQuery::try_from(format!("{}{path}", self.base_path)).unwrap_or(path)
        };
        if self.plain.is_some() {
            // The request line's form (RFC 9112 §3.2.1): the kept connections already
            // go to the upstream, so nothing else reads an authority here.
            req.uri = Uri::from(path);
        } else {
            let mut parts = http::uri::Parts::default();
            parts.scheme = Some(self.scheme.clone());
            parts.authority = Some(self.authority.clone());
            parts.path_and_query = Some(path.clone());
            // Every part comes from a valid Uri, so this cannot fail; keep the path alone if it does.
            req.uri = Uri::from_parts(parts).unwrap_or_else(|_| Uri::from(path));
        }
        req.version = self.version;
        let headers = &mut req.headers;
        strip_hop_by_hop(headers);
        if !self.preserve_host || !headers.contains_key(http::header::HOST) {
            headers.insert(http::header::HOST, self.host.clone());
        }
    }

    /// Sends one attempt and waits for the response head, at most `request_timeout`;
    /// on a connection `bound` drives, where it can.
    ///
    /// Not an `async fn`, and each way timed on its own: the request is held once in
    /// the state, which is moved on every request.
    #[inline(always)]
    pub fn send<'a>(
        &'a self,
        req: Request<ProxyBody>,
        bound: Option<&'a Bound>,
    ) -> impl Future<Output = Result<Response<Incoming>, SendError>> + 'a {
        let slot = WORKER.with(Cell::get);
        let limit = self.request_timeout;
        async move {
            let sent = match &self.plain {
                Some(plain) => tokio::time::timeout(limit, plain.send(slot, bound, req)).await,
                None => tokio::time::timeout(limit, self.pooled(slot, req)).await,
            };
            sent.unwrap_or(Err(SendError::Timeout(limit)))
        }
    }

    /// Sends through hyper-util's pool of runtime `slot`.
    async fn pooled(
        &self,
        slot: usize,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let pool = self.clients.get(slot).unwrap_or(&self.clients[0]);
        let pool = pool.get_or_init(|| self.builder.build(self.connector.clone()));
        match pool.request(req).await {
            Ok(response) => Ok(response),
            Err(e) if e.is_connect() => {
                Err(SendError::Connect(ConnectCause::of(&e, &self.server_name)))
            }
            Err(e) => match ConnectCause::tls_in(&e, &self.server_name) {
                Some(cause) => Err(SendError::Connect(cause)),
                None => Err(SendError::Failed(e.into())),
            },
        }
    }

    /// The per-attempt timeout.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }
}

/// Kept connections to a plain-http upstream, `per_pool` idle in each runtime.
fn plain(
    settings: &UpstreamSettings,
    connector: HttpConnector,
    per_pool: usize,
    server_name: &str,
) -> Option<Plain> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(Scheme::HTTP);
    parts.authority = Some(settings.url.authority.clone());
    parts.path_and_query = Some(PathAndQuery::from_static("/"));
    // Every part comes from a valid Uri, so this cannot fail; hyper-util's pool
    // serves the upstream if it does.
    let target = Uri::from_parts(parts).ok()?;
    Some(Plain::new(
        connector,
        target,
        worker_count() + 1,
        per_pool,
        settings.pool.idle_timeout,
        server_name.to_string(),
    ))
}

/// The system's trusted roots (the bundled Mozilla set when it has none), plus `ca_file`.
fn roots(settings: &UpstreamSettings) -> Result<RootCertStore, ClientError> {
    let mut roots = RootCertStore::empty();
    if settings.url.scheme == Scheme::HTTPS {
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if roots.is_empty() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
    }
    if let Some(path) = &settings.ca_file {
        // The same loading `check` does, so a file it accepts is one the client takes.
        let extra = config::ca_roots(path).map_err(|reason| ClientError::CaFile {
            path: path.display().to_string(),
            reason,
        })?;
        roots.roots.extend(extra.roots);
    }
    if settings.url.scheme == Scheme::HTTPS && roots.is_empty() {
        return Err(ClientError::NoRoots);
    }
    Ok(roots)
}
