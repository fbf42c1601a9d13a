//! JSON paths: `data[0].id`, for captures and event matches.

#[derive(Debug, Clone, PartialEq)]
enum PathSeg {
    Key(String),
    Index(usize),
}

/// `data[0].id`, optionally ending in `?`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JsonPath {
    pub(super) text: String,
    segs: Vec<PathSeg>,
    pub(super) optional: bool,
}

impl JsonPath {
    pub(super) fn parse(s: &str) -> Result<JsonPath, String> {
        let (body, optional) = match s.strip_suffix('?') {
            Some(b) => (b, true),
            None => (s, false),
        };
        let bad = |why: &str| format!("bad JSON path {s:?}: {why}");
        let mut segs = Vec::new();
        let mut rest = body;
        if rest.is_empty() {
            return Err(bad("empty"));
        }
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').ok_or_else(|| bad("unclosed ["))?;
                let n = r[..end]
                    .parse::<usize>()
                    .map_err(|_| bad("an index is a number"))?;
                segs.push(PathSeg::Index(n));
                rest = &r[end + 1..];
            } else {
                if !segs.is_empty() {
                    rest = rest
                        .strip_prefix('.')
                        .ok_or_else(|| bad("expected . or ["))?;
                }
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                if end == 0 {
                    return Err(bad("empty key"));
                }
                segs.push(PathSeg::Key(rest[..end].to_owned()));
                rest = &rest[end..];
            }
        }
        Ok(JsonPath {
            text: body.to_owned(),
            segs,
            optional,
        })
    }

    /// The value there as a variable: a string as is, anything else as JSON text; `null` and
    /// missing values are `None`.
    pub(super) fn get(&self, v: &serde_json::Value) -> Option<String> {
        let mut cur = v;
        for s in &self.segs {
            cur = match s {
                PathSeg::Key(k) => cur.get(k)?,
                PathSeg::Index(i) => cur.get(i)?,
            };
        }
        match cur {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn json_paths() {
        let v = serde_json::json!({"data": [{"id": "s1", "n": 2, "o": {"k": true}}], "x": null});
        let get = |p: &str| JsonPath::parse(p).unwrap().get(&v);
        assert_eq!(get("data[0].id").as_deref(), Some("s1"));
        assert_eq!(get("data[0].n").as_deref(), Some("2"));
        assert_eq!(get("data[0].o").as_deref(), Some("{\"k\":true}"));
        assert_eq!(get("data[1].id?"), None);
        assert_eq!(get("x"), None);
        assert!(JsonPath::parse("data[0].id?").unwrap().optional);
        let arr = serde_json::json!([{"item_id": "i"}]);
        assert_eq!(
            JsonPath::parse("[0].item_id").unwrap().get(&arr).as_deref(),
            Some("i")
        );
        for bad in ["", "?", ".id", "a..b", "a[x]", "a[0", "a[0]b"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}
