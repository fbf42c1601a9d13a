//! Response body: a whole buffer, or frames pushed through a channel as they are produced.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// The body of every simulator response.
pub(crate) enum SimBody {
    /// A complete body (possibly empty), sent at once.
    Full(Option<Bytes>),
    /// A complete streamed body (an instant-mode SSE answer): one frame, sent with chunked
    /// transfer encoding like a real stream, so hyper writes the head, the frame and the
    /// terminating chunk together.
    Once(Option<Bytes>),
    /// A streamed body; each received buffer becomes one frame, the stream ends when every
    /// sender is dropped. Dropping the body (client gone) makes sends fail.
    Channel(mpsc::Receiver<Bytes>),
}

impl SimBody {
    /// A complete body.
    pub(crate) fn full(data: impl Into<Bytes>) -> Self {
        let data = data.into();
        Self::Full((!data.is_empty()).then_some(data))
    }

    /// An empty body.
    pub(crate) fn empty() -> Self {
        Self::Full(None)
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Self::Full(data) | Self::Once(data) => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(d))))
            }
            Self::Channel(rx) => rx.poll_recv(cx).map(|o| o.map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Self::Full(None) | Self::Once(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Full(d) => SizeHint::with_exact(d.as_ref().map_or(0, |d| d.len() as u64)),
            Self::Once(_) | Self::Channel(_) => SizeHint::default(),
        }
    }
}
