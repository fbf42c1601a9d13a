//! JSON strings as `serde_json` writes them, without its byte-at-a-time escaping for the
//! usual string that needs none: [`write_str`] and [`push_str`] (a record line's strings, a
//! request body's model), and the scan they share with the chunk parser, [`first_special`].

/// Where the first `"`, `\\` or control character of `b` is: eight bytes at a time (a whole
/// answer's text is hundreds of bytes; a byte at a time it was most of the parse).
pub fn first_special(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = b.chunks_exact(8);
    let mut at = 0;
    for w in words.by_ref() {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(w);
        let w = u64::from_le_bytes(eight);
        let quote = w ^ (ONES * u64::from(b'"'));
        let slash = w ^ (ONES * u64::from(b'\\'));
        // The lowest byte flagged in each is exact (only bytes above a match can be flagged
        // by a borrow), so the lowest of the three is the first match.
        let found = ((quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash)
            | (w.wrapping_sub(ONES * 0x20) & !w))
            & HIGH;
        if found != 0 {
            return Some(at + (found.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|n| at + n)
}

/// Appends `s` as a JSON string, byte for byte what `serde_json` writes: quoted as it is
/// when it holds no `"`, `\\` or control character, else escaped by `serde_json`.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    if first_special(s.as_bytes()).is_none() {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// [`write_str`] into a `String`.
pub fn push_str(out: &mut String, s: &str) {
    if first_special(s.as_bytes()).is_none() {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_scan_finds_the_first_quote_escape_or_control_byte() {
        let plain = |n: usize| vec![b'a'; n];
        for len in 0..40 {
            assert_eq!(first_special(&plain(len)), None, "len {len}");
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                    let mut b = plain(len);
                    b[at] = special;
                    // A later match (or a byte just above the range) changes nothing.
                    if at + 1 < len {
                        b[at + 1] = b'"';
                    }
                    assert_eq!(first_special(&b), Some(at), "len {len} at {at} {special}");
                }
                let mut b = plain(len);
                b[at] = 0x20;
                b.iter_mut().skip(at + 1).for_each(|c| *c = 0xff);
                assert_eq!(first_special(&b), None, "len {len} at {at}");
            }
        }
        // Bytes just around the ones looked for, and multi-byte UTF-8.
        let near = "!#[]^`~ \u{7f}é中🌟".repeat(3);
        assert_eq!(first_special(near.as_bytes()), None);
        assert_eq!(
            first_special(format!("{near}\"").as_bytes()),
            Some(near.len())
        );
    }

    #[test]
    fn strings_are_written_as_serde_writes_them() {
        let cases = [
            "",
            "plain",
            "s-00042",
            "2026-12-06T05:30:35.1234Z",
            "a \"quoted\" word",
            "back\\slash",
            "tab\tnew\nline\r",
            "\u{0}\u{1f}\u{7f}",
            "é中🌟 ok",
            "</script>",
        ];
        for s in cases {
            let want = serde_json::to_string(s).unwrap_or_default();
            let mut v = b"x".to_vec();
            write_str(&mut v, s);
            assert_eq!(v, format!("x{want}").into_bytes(), "{s:?}");
            let mut t = String::from("y");
            push_str(&mut t, s);
            assert_eq!(t, format!("y{want}"), "{s:?}");
        }
    }
}
