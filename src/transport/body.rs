//! Bodies in both directions. Upstream and client bodies stream untouched; a request
//! body of at most `max_body_bytes` is held so a throttled attempt can be replayed; an
//! error body of at most [`MAX_ERROR_BODY`] is read for classification; a body that
//! turned out too large goes on as the part already read followed by the rest. A
//! watched body shows its frames to a [`WatchFrames`] on the way (the proxy's verdict
//! for DynamoDB batch answers and gRPC trailers). A request body an early answer left
//! unread is read and thrown away, up to a bound, so the client sees that answer.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::route::BodyScan;
use crate::throttle::MAX_ERROR_BODY;

/// Every body easeoff sends, to the upstream or to a client.
#[derive(Debug)]
pub enum ProxyBody {
    /// Streamed as it arrives.
    Stream(Incoming),
    /// Held in memory: a request kept for replay, a small classified error body, or
    /// easeoff's own reply.
    Full {
        data: Option<Bytes>,
        /// Boxed: rare, and every request and answer is moved about with room for it.
        trailers: Option<Box<HeaderMap>>,
    },
    /// The part read before deciding, then the rest of the stream.
    Prefixed {
        prefix: Option<Bytes>,
        rest: Incoming,
    },
    /// Streamed, and looked at on the way for batch or gRPC throttle signals.
    Watched {
        inner: Incoming,
        watch: Box<dyn WatchFrames>,
    },
}

impl ProxyBody {
    /// A complete body of `data`.
    pub fn full(data: impl Into<Bytes>) -> ProxyBody {
        let data: Bytes = data.into();
        ProxyBody::Full {
            data: (!data.is_empty()).then_some(data),
            trailers: None,
        }
    }

    /// What is held of the body in memory: all of it, or the part read before the
    /// rest streams; `None` for a body that only streams.
    pub fn held(&self) -> Option<&Bytes> {
        static EMPTY: Bytes = Bytes::new();
        match self {
            ProxyBody::Full { data, .. } => Some(data.as_ref().unwrap_or(&EMPTY)),
            ProxyBody::Prefixed { prefix, .. } => Some(prefix.as_ref().unwrap_or(&EMPTY)),
            _ => None,
        }
    }

    /// A copy for another attempt, if the body is held in memory.
    pub fn replay(&self) -> Option<ProxyBody> {
        match self {
            ProxyBody::Full { data, trailers } => Some(ProxyBody::Full {
                data: data.clone(),
                trailers: trailers.clone(),
            }),
            _ => None,
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Stream(body) => Pin::new(body).poll_frame(cx),
            ProxyBody::Full { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(|t| Frame::trailers(*t)))
                    .map(Ok),
            ),
            ProxyBody::Prefixed { prefix, rest } => match prefix.take() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Pin::new(rest).poll_frame(cx),
            },
            ProxyBody::Watched { inner, watch } => {
                let polled = Pin::new(inner).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => watch.see(frame),
                    Poll::Ready(None) => watch.finish(),
                    Poll::Ready(Some(Err(_))) | Poll::Pending => {}
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Stream(body) => body.is_end_stream(),
            ProxyBody::Full { data, trailers } => data.is_none() && trailers.is_none(),
            ProxyBody::Prefixed { prefix, rest } => prefix.is_none() && rest.is_end_stream(),
            ProxyBody::Watched { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Stream(body) | ProxyBody::Watched { inner: body, .. } => body.size_hint(),
            ProxyBody::Full { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            ProxyBody::Prefixed { prefix, rest } => {
                let extra = prefix.as_ref().map_or(0, |p| p.len() as u64);
                let inner = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + extra);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + extra);
                }
                hint
            }
        }
    }
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Broken(#[from] hyper::Error),
    #[error("no body data for {0:?}")]
    Idle(Duration),
}

/// Reads `body` if it fits in `limit` bytes: `Full` when it does (replayable),
/// `Prefixed` when it turned out larger, `Stream` untouched when its announced length
/// already says so. With `idle`, a sender silent that long fails the read.
pub async fn read_up_to(
    body: Incoming,
    limit: u64,
    idle: Option<Duration>,
) -> Result<ProxyBody, ReadError> {
    if body.size_hint().lower() > limit {
        return Ok(ProxyBody::Stream(body));
    }
    read_start(body, limit, None, idle).await
}

/// [`read_up_to`], but a body announced larger than `limit` is read up to it too, so
/// that what it starts with can place it (its lane); it then goes on as `Prefixed`.
/// With `scan`, a body whose lane fields have not passed by `limit` is read on until
/// they have (or the body ends), holding at most `scan.most` bytes (and a frame).
pub async fn read_start(
    body: Incoming,
    limit: u64,
    scan: Option<BodyScan<'_>>,
    idle: Option<Duration>,
) -> Result<ProxyBody, ReadError> {
    if body.is_end_stream() {
        return Ok(ProxyBody::Full {
            data: None,
            trailers: None,
        });
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut scan = scan;
    let mut body = body;
    let mut data = BytesMut::new();
    let mut trailers = None;
    loop {
        let frame = match idle {
            Some(idle) => tokio::time::timeout(idle, body.frame())
                .await
                .map_err(|_| ReadError::Idle(idle))?,
            None => body.frame().await,
        };
        let Some(frame) = frame else { break };
        match frame?.into_data() {
            Ok(chunk) => {
                let looking = scan
                    .as_mut()
                    .is_some_and(|scan| !scan.fields.is_done() && !scan.fields.feed(&chunk));
                data.extend_from_slice(&chunk);
                let most = scan
                    .as_ref()
                    .filter(|_| looking)
                    .map_or(0, |scan| scan.most);
                if data.len() > limit.max(usize::try_from(most).unwrap_or(usize::MAX)) {
                    return Ok(ProxyBody::Prefixed {
                        prefix: Some(data.freeze()),
                        rest: body,
                    });
                }
            }
            Err(frame) => trailers = frame.into_trailers().ok().map(Box::new),
        }
    }
    let data = data.freeze();
    Ok(ProxyBody::Full {
        data: (!data.is_empty()).then_some(data),
        trailers,
    })
}

/// The most of an unread request body [`discard`] reads after an early answer, and
/// for how long: what nginx's lingering close allows, about.
pub const LINGER_BYTES: u64 = 32 * 1024 * 1024;
/// See [`LINGER_BYTES`].
pub const LINGER_TIME: Duration = Duration::from_secs(5);

/// Lets a client finish sending a request body that its answer (413, 400, a shed)
/// did not need. Dropping the body makes hyper stop reading and close the connection
/// with data unread, which the kernel answers with a reset: a client still writing
/// sees EPIPE, never the answer. So the rest is read and discarded in the background
/// up to `LINGER_BYTES` or `LINGER_TIME`, as nginx's lingering close does. A body
/// not yet asked for from a client waiting on `Expect: 100-continue` is dropped
/// instead: that client sends nothing until told to, and reads the answer.
pub fn discard(body: ProxyBody, expects_continue: bool) {
    let unread = match &body {
        ProxyBody::Full { .. } => false,
        ProxyBody::Stream(_) => !expects_continue,
        _ => true,
    };
    if !unread || body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let mut body = body;
        let mut read = 0u64;
        let _ = tokio::time::timeout(LINGER_TIME, async {
            while let Some(Ok(frame)) = body.frame().await {
                read += frame.data_ref().map_or(0, |d| d.len() as u64);
                if read >= LINGER_BYTES {
                    break;
                }
            }
        })
        .await;
    });
}

/// Whether a request asks for `100 Continue` before it sends its body.
pub fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Reads an error body for classification: its bytes when it is at most
/// [`MAX_ERROR_BODY`] long.
pub async fn read_error_body(body: Incoming) -> Result<(ProxyBody, Option<Bytes>), ReadError> {
    let body = read_up_to(body, MAX_ERROR_BODY as u64, None).await?;
    let bytes = match &body {
        ProxyBody::Full { data, .. } => Some(data.clone().unwrap_or_default()),
        _ => None,
    };
    Ok((body, bytes))
}

/// Looks at a streamed body's frames as they pass to the client.
pub trait WatchFrames: Send + Sync + std::fmt::Debug {
    /// One frame on its way.
    fn see(&mut self, frame: &Frame<Bytes>);
    /// The body ended (not called when it broke off).
    fn finish(&mut self);
}
