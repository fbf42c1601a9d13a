//! Byte sizes as people write them: `8MiB`, `1 GiB`, `1500` ([`parse_bytes`]), and back
//! ([`human_bytes`]), for size flags and the messages that name a cap.

/// A byte count for messages: `8 MiB`, `1 GiB`, `1500 bytes`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size && n % size == 0 {
            return format!("{} {unit}", n / size);
        }
    }
    for (unit, size) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} bytes")
}

/// Parses a byte count: a plain number of bytes, or a number with a unit (`KiB`, `MiB`, `GiB`,
/// also `K`/`M`/`G`/`KB`/`MB`/`GB`, read as powers of 1024), case-insensitive. Zero is refused.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "{s:?}: unknown size unit {other:?} (use bytes, KiB, MiB or GiB)"
            ));
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 8MiB or 1048576)"))?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?}: a size must be at least 1 byte"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_bytes("1 GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("1500").unwrap(), 1500);
        assert_eq!(parse_bytes("0.5k").unwrap(), 512);
        assert!(parse_bytes("0").is_err());
        assert!(
            parse_bytes("12 parsecs")
                .unwrap_err()
                .contains("unknown size unit")
        );
        assert!(parse_bytes("lots").is_err());
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(1500), "1.5 KiB");
        assert_eq!(human_bytes(12), "12 bytes");
    }
}
