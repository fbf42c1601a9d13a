//! multipart/form-data bodies.

use std::borrow::Cow;

use bytes::Bytes;

/// One part of a multipart body.
#[derive(Debug)]
pub(super) struct MultipartPart<'a> {
    pub(super) name: &'a str,
    pub(super) filename: Option<&'a str>,
    pub(super) content_type: Option<&'a str>,
    pub(super) data: Cow<'a, [u8]>,
}

const BOUNDARY: &str = "bench-journeys-7b3f1c9e2d5a";

/// A quoted-string parameter as browsers write it (`"`, CR and LF percent-encoded).
fn quote_param(s: &str) -> String {
    s.replace('"', "%22")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// `multipart/form-data` (RFC 7578): the content type (with its boundary) and the body. The
/// boundary is one that no part contains.
pub(super) fn multipart_body(parts: &[MultipartPart<'_>]) -> (String, Bytes) {
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    let mut boundary = BOUNDARY.to_owned();
    let mut n = 0u32;
    while parts.iter().any(|p| contains(&p.data, boundary.as_bytes())) {
        n += 1;
        boundary = format!("{BOUNDARY}-{n}");
    }
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        out.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"{}\"",
                quote_param(p.name)
            )
            .as_bytes(),
        );
        if let Some(f) = p.filename {
            out.extend_from_slice(format!("; filename=\"{}\"", quote_param(f)).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        let ct = match (p.content_type, p.filename) {
            (Some(ct), _) => Some(ct),
            (None, Some(_)) => Some("application/octet-stream"),
            (None, None) => None,
        };
        if let Some(ct) = ct {
            out.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&p.data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (
        format!("multipart/form-data; boundary={boundary}"),
        Bytes::from(out),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn multipart_bytes() {
        let parts = [
            MultipartPart {
                name: "bundle",
                filename: Some("a\".tar.gz"),
                content_type: Some("application/gzip"),
                data: Cow::Borrowed(b"\x1f\x8b\x00\r\n"),
            },
            MultipartPart {
                name: "note",
                filename: None,
                content_type: None,
                data: Cow::Borrowed(b"hi"),
            },
        ];
        let (ct, body) = multipart_body(&parts);
        assert_eq!(ct, format!("multipart/form-data; boundary={BOUNDARY}"));
        let mut want = format!(
            "--{BOUNDARY}\r\n\
             Content-Disposition: form-data; name=\"bundle\"; filename=\"a%22.tar.gz\"\r\n\
             Content-Type: application/gzip\r\n\
             \r\n"
        )
        .into_bytes();
        want.extend_from_slice(b"\x1f\x8b\x00\r\n\r\n");
        want.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\n\
                 Content-Disposition: form-data; name=\"note\"\r\n\
                 \r\n\
                 hi\r\n\
                 --{BOUNDARY}--\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&want)
        );
        assert_eq!(&body[..], &want[..]);

        // A part that contains the boundary gets another one.
        let clash = [MultipartPart {
            name: "x",
            filename: None,
            content_type: None,
            data: Cow::Owned(format!("--{BOUNDARY}").into_bytes()),
        }];
        let (ct, _) = multipart_body(&clash);
        assert_eq!(ct, format!("multipart/form-data; boundary={BOUNDARY}-1"));
    }
}
