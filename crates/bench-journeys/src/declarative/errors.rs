//! Error messages: where in the file a parse error is.

/// `line L, column C` of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map_or(1, |l| l.chars().count() + 1);
    (line, col)
}

/// A TOML syntax error on one line: `line 3, column 7: <what>`.
pub(super) fn toml_message(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let (l, c) = line_col(text, span.start);
            format!("line {l}, column {c}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

/// A deserialization error with where it happened: `journey "fork": measure[0]: unknown field
/// `pathh`, expected one of … (line 12, column 1)`.
pub(super) fn located(text: &str, e: &serde_path_to_error::Error<toml::de::Error>) -> String {
    use serde_path_to_error::Segment;

    let segs: Vec<&Segment> = e.path().iter().collect();
    let mut ctx = String::new();
    let mut i = 0;
    if let (Some(Segment::Map { key }), Some(Segment::Seq { index })) = (segs.first(), segs.get(1))
        && key == "journey"
    {
        // Name the journey when the file says its name.
        let name = toml::from_str::<toml::Table>(text).ok().and_then(|t| {
            t.get("journey")?
                .as_array()?
                .get(*index)?
                .get("name")?
                .as_str()
                .map(str::to_owned)
        });
        ctx = match name {
            Some(n) => format!("journey {n:?}"),
            None => format!("journey[{index}]"),
        };
        i = 2;
    }
    for s in &segs[i..] {
        match s {
            Segment::Seq { index } => ctx.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !ctx.is_empty() {
                    ctx.push_str(": ");
                }
                ctx.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    let inner = e.inner();
    let mut msg = inner.message().to_owned();
    // serde names the unknown key itself; drop it from the context.
    if let Some(key) = msg
        .strip_prefix("unknown field `")
        .and_then(|m| m.split('`').next())
        && let Some(stripped) = ctx.strip_suffix(key)
    {
        ctx = stripped.trim_end_matches(": ").to_owned();
    }
    if let Some(span) = inner.span() {
        let (l, c) = line_col(text, span.start);
        msg.push_str(&format!(" (line {l}, column {c})"));
    }
    if ctx.is_empty() {
        msg
    } else {
        format!("{ctx}: {msg}")
    }
}
