//! A body that fails when its source goes silent for too long, so an upstream that
//! sends a head and then nothing cannot hold a client (and its connection) forever.
//! The timer is made only once the body first has to wait. It may start with a frame
//! already read from its source.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use crate::clock::Instant;

/// The error a silent body ends with.
#[derive(Debug, thiserror::Error)]
#[error("no body data for {0:?}")]
pub struct BodyIdle(pub Duration);

/// `inner`, failing after `idle` without a frame.
pub struct IdleBody<B: Body> {
    first: Option<Frame<B::Data>>,
    inner: B,
    idle: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// A frame arrived since the timer was last set.
    progressed: bool,
}

impl<B: Body> IdleBody<B> {
    /// Wraps `inner`, to be sent after `first` if given.
    pub fn new(first: Option<Frame<B::Data>>, inner: B, idle: Duration) -> IdleBody<B> {
        IdleBody {
            first,
            inner,
            idle,
            timer: None,
            progressed: false,
        }
    }
}

impl<B> Body for IdleBody<B>
where
    B: Body + Unpin,
    B::Data: Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.progressed = true;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let deadline = Instant::now() + idle;
                let timer = match &mut this.timer {
                    Some(timer) => {
                        if this.progressed {
                            timer.as_mut().reset(deadline);
                        }
                        timer
                    }
                    None => this
                        .timer
                        .insert(Box::pin(tokio::time::sleep_until(deadline))),
                };
                this.progressed = false;
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyIdle(idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let first = self
            .first
            .as_ref()
            .and_then(Frame::data_ref)
            .map_or(0, |d| d.remaining() as u64);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + first);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + first);
        }
        hint
    }
}
