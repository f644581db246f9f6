//! Response bodies: the upstream's, streamed untouched; one read in full for
//! classification (at most [`MAX_ERROR_BODY`] bytes, trailers kept); the start of one
//! that turned out too large, followed by the rest; or easeoff's own.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::throttle::MAX_ERROR_BODY;

/// Every body easeoff sends to its clients.
#[derive(Debug)]
pub enum ResponseBody {
    /// Streamed from the upstream as it arrives.
    Upstream(Incoming),
    /// Held in memory: a small error body that was classified, or easeoff's own reply.
    Full {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
    /// The part read while classifying, then the rest of the stream.
    Prefixed {
        prefix: Option<Bytes>,
        rest: Incoming,
    },
}

impl ResponseBody {
    /// A complete body of `data`.
    pub fn full(data: impl Into<Bytes>) -> ResponseBody {
        let data: Bytes = data.into();
        ResponseBody::Full {
            data: (!data.is_empty()).then_some(data),
            trailers: None,
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ResponseBody::Upstream(body) => Pin::new(body).poll_frame(cx),
            ResponseBody::Full { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
            ResponseBody::Prefixed { prefix, rest } => match prefix.take() {
                Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                None => Pin::new(rest).poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Upstream(body) => body.is_end_stream(),
            ResponseBody::Full { data, trailers } => data.is_none() && trailers.is_none(),
            ResponseBody::Prefixed { prefix, rest } => prefix.is_none() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Upstream(body) => body.size_hint(),
            ResponseBody::Full { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            ResponseBody::Prefixed { prefix, rest } => {
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

/// What reading an error body for classification gave.
pub enum SmallBody {
    /// The whole body, short enough to classify.
    Complete(ResponseBody, Bytes),
    /// Longer than [`MAX_ERROR_BODY`]: not classified, passed on as it comes.
    TooLarge(ResponseBody),
}

/// Reads `body` up to [`MAX_ERROR_BODY`] bytes.
pub async fn read_small(mut body: Incoming) -> Result<SmallBody, hyper::Error> {
    let mut data = BytesMut::new();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = match frame?.into_data() {
            Ok(chunk) => {
                data.extend_from_slice(&chunk);
                if data.len() > MAX_ERROR_BODY {
                    return Ok(SmallBody::TooLarge(ResponseBody::Prefixed {
                        prefix: Some(data.freeze()),
                        rest: body,
                    }));
                }
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(t) = frame.into_trailers() {
            trailers = Some(t);
        }
    }
    let data = data.freeze();
    let body = ResponseBody::Full {
        data: (!data.is_empty()).then(|| data.clone()),
        trailers,
    };
    Ok(SmallBody::Complete(body, data))
}
