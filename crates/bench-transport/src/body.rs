//! A request body of shared pieces, sent in order without being joined: the client hands them
//! to the socket with vectored writes, so a long conversation is never copied into one buffer.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// A request body made of pieces (cheap to clone: each piece is a shared [`Bytes`]).
#[derive(Debug, Clone, Default)]
pub struct Segments {
    parts: VecDeque<Bytes>,
    len: u64,
}

impl Segments {
    /// The body made of `parts`, in order (empty pieces are dropped).
    pub fn new(parts: impl IntoIterator<Item = Bytes>) -> Self {
        let parts: VecDeque<Bytes> = parts.into_iter().filter(|b| !b.is_empty()).collect();
        let len = parts.iter().map(|b| b.len() as u64).sum();
        Segments { parts, len }
    }

    /// Bytes in all.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// No byte at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many pieces.
    pub fn pieces(&self) -> usize {
        self.parts.len()
    }

    /// The pieces, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Bytes> {
        self.parts.iter()
    }

    /// The pieces joined into one buffer (a copy; for tests and transports that need one).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts[0].clone(),
            _ => {
                let mut v = Vec::with_capacity(self.len as usize);
                for p in &self.parts {
                    v.extend_from_slice(p);
                }
                Bytes::from(v)
            }
        }
    }
}

impl From<Bytes> for Segments {
    fn from(b: Bytes) -> Self {
        Segments::new([b])
    }
}

impl Body for Segments {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match this.parts.pop_front() {
            Some(b) => {
                this.len -= b.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn pieces_come_out_in_order_with_an_exact_length() {
        let s = Segments::new([
            Bytes::from_static(b"{\"a\":"),
            Bytes::new(),
            Bytes::from(vec![b'1'; 3]),
            Bytes::from_static(b"}"),
        ]);
        assert_eq!(s.len(), 9);
        assert_eq!(s.pieces(), 3);
        assert_eq!(s.size_hint().exact(), Some(9));
        assert_eq!(&s.to_bytes()[..], b"{\"a\":111}");
        let got = s.clone().collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"{\"a\":111}");
        assert!(Segments::default().is_end_stream());
    }
}
