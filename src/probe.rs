//! `easeoff probe URL`: one plain-HTTP GET whose answer decides an exit code, so a
//! container image without a shell or an HTTP client can still have a health check.
//! The binary's `main.rs` maps the result to the exit code and prints the error.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, Uri, header};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a probe did not get a 2xx answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("invalid URL \"{0}\": write http://HOST[:PORT]/PATH")]
    Url(String),
    #[error("only http:// URLs can be probed, got \"{0}\"")]
    Scheme(String),
    #[error("cannot connect to {authority}: {source}")]
    Connect {
        authority: String,
        source: std::io::Error,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the HTTP exchange failed: {0}")]
    Http(#[from] hyper::Error),
    #[error("answered {0}")]
    Status(StatusCode),
}

/// GETs `url` (plain HTTP/1.1) and returns the status when it is 2xx; everything,
/// connecting included, must finish within `timeout`.
pub async fn probe(url: &str, timeout: Duration) -> Result<StatusCode, ProbeError> {
    let uri: Uri = url.parse().map_err(|_| ProbeError::Url(url.into()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => return Err(ProbeError::Scheme(url.into())),
        None => return Err(ProbeError::Url(url.into())),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| ProbeError::Url(url.into()))?
        .clone();
    let status = tokio::time::timeout(timeout, get(&uri, &authority))
        .await
        .map_err(|_| ProbeError::Timeout(timeout))??;
    if status.is_success() {
        Ok(status)
    } else {
        Err(ProbeError::Status(status))
    }
}

async fn get(uri: &Uri, authority: &http::uri::Authority) -> Result<StatusCode, ProbeError> {
    let address = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    );
    let stream = TcpStream::connect(&address)
        .await
        .map_err(|source| ProbeError::Connect {
            authority: address,
            source,
        })?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let path = uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let request = Request::get(path)
        .header(header::HOST, authority.as_str())
        .header(header::USER_AGENT, "easeoff-probe")
        .body(Empty::<Bytes>::new())
        .map_err(|_| ProbeError::Url(uri.to_string()))?;
    let response = sender.send_request(request).await?;
    Ok(response.status())
}
