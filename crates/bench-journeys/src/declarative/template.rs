//! Templates: strings with `{{var}}` placeholders, and JSON bodies made of them.

use crate::journey::Failure;

use super::run::Vars;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seg {
    Lit(String),
    Var(String),
    Env(String),
}

/// A string with `{{var}}`, `{{env.NAME}}`, `{{index}}`, `{{item}}` placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Template {
    pub(super) segs: Vec<Seg>,
}

pub(super) fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl Template {
    pub(super) fn parse(s: &str) -> Result<Template, String> {
        let mut segs = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find("{{") {
            if i > 0 {
                segs.push(Seg::Lit(rest[..i].to_owned()));
            }
            let after = &rest[i + 2..];
            let Some(j) = after.find("}}") else {
                return Err(format!("unclosed {{{{ in {s:?}"));
            };
            let name = after[..j].trim();
            if let Some(env) = name.strip_prefix("env.") {
                if !is_ident(env) {
                    return Err(format!("invalid environment variable {{{{{name}}}}}"));
                }
                segs.push(Seg::Env(env.to_owned()));
            } else if is_ident(name) {
                segs.push(Seg::Var(name.to_owned()));
            } else {
                return Err(format!("invalid variable {{{{{name}}}}} in {s:?}"));
            }
            rest = &after[j + 2..];
        }
        if !rest.is_empty() {
            segs.push(Seg::Lit(rest.to_owned()));
        }
        Ok(Template { segs })
    }

    pub(super) fn vars(&self) -> impl Iterator<Item = &str> {
        self.segs.iter().filter_map(|s| match s {
            Seg::Var(v) => Some(v.as_str()),
            _ => None,
        })
    }

    /// The text when it has no placeholders.
    pub(super) fn literal(&self) -> Option<String> {
        self.segs
            .iter()
            .map(|s| match s {
                Seg::Lit(l) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Fills in the placeholders; `for_uri` percent-encodes what a URI cannot carry.
    pub(super) fn render(&self, vars: &Vars<'_>, for_uri: bool) -> Result<String, Failure> {
        let mut out = String::new();
        for s in &self.segs {
            match s {
                Seg::Lit(l) => out.push_str(l),
                Seg::Var(v) => {
                    let value = vars
                        .get(v)
                        .ok_or_else(|| Failure::other(format!("unknown variable {{{{{v}}}}}")))?;
                    push_value(&mut out, value, for_uri);
                }
                Seg::Env(name) => {
                    let value = std::env::var(name).map_err(|_| {
                        Failure::other(format!("environment variable {name} is not set"))
                    })?;
                    push_value(&mut out, &value, for_uri);
                }
            }
        }
        Ok(out)
    }
}

fn push_value(out: &mut String, value: &str, for_uri: bool) {
    if !for_uri {
        out.push_str(value);
        return;
    }
    for b in value.bytes() {
        if b.is_ascii_graphic() && !b"\"<>\\^`{|}#".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// A JSON body with templated strings.
#[derive(Debug, Clone)]
pub(super) enum JsonT {
    Lit(serde_json::Value),
    Str(Template),
    Arr(Vec<JsonT>),
    Obj(Vec<(String, JsonT)>),
}

impl JsonT {
    pub(super) fn compile(v: &toml::Value) -> Result<JsonT, String> {
        Ok(match v {
            toml::Value::String(s) => {
                let t = Template::parse(s)?;
                match t.literal() {
                    Some(l) => JsonT::Lit(serde_json::Value::String(l)),
                    None => JsonT::Str(t),
                }
            }
            toml::Value::Integer(i) => JsonT::Lit((*i).into()),
            toml::Value::Float(f) => JsonT::Lit(
                serde_json::Number::from_f64(*f)
                    .map(serde_json::Value::Number)
                    .ok_or_else(|| format!("{f} is not a JSON number"))?,
            ),
            toml::Value::Boolean(b) => JsonT::Lit((*b).into()),
            toml::Value::Datetime(d) => JsonT::Lit(d.to_string().into()),
            toml::Value::Array(a) => {
                JsonT::Arr(a.iter().map(JsonT::compile).collect::<Result<_, _>>()?)
            }
            toml::Value::Table(t) => JsonT::Obj(
                t.iter()
                    .map(|(k, v)| Ok((k.clone(), JsonT::compile(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }

    pub(super) fn templates<'a>(&'a self, out: &mut Vec<&'a Template>) {
        match self {
            JsonT::Lit(_) => {}
            JsonT::Str(t) => out.push(t),
            JsonT::Arr(a) => a.iter().for_each(|j| j.templates(out)),
            JsonT::Obj(o) => o.iter().for_each(|(_, j)| j.templates(out)),
        }
    }

    pub(super) fn render(&self, vars: &Vars<'_>) -> Result<serde_json::Value, Failure> {
        Ok(match self {
            JsonT::Lit(v) => v.clone(),
            JsonT::Str(t) => serde_json::Value::String(t.render(vars, false)?),
            JsonT::Arr(a) => serde_json::Value::Array(
                a.iter().map(|j| j.render(vars)).collect::<Result<_, _>>()?,
            ),
            JsonT::Obj(o) => serde_json::Value::Object(
                o.iter()
                    .map(|(k, j)| Ok((k.clone(), j.render(vars)?)))
                    .collect::<Result<_, Failure>>()?,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::declarative::run::{Lists, Scope};
    use std::collections::HashMap;

    #[test]
    fn templates() {
        let t = Template::parse("/v1/{{ sid }}/x/{{env.HOME}}{{index}}").unwrap();
        assert_eq!(
            t.segs,
            vec![
                Seg::Lit("/v1/".into()),
                Seg::Var("sid".into()),
                Seg::Lit("/x/".into()),
                Seg::Env("HOME".into()),
                Seg::Var("index".into()),
            ]
        );
        assert!(Template::parse("a {{b").unwrap_err().contains("unclosed"));
        assert!(
            Template::parse("{{a b}}")
                .unwrap_err()
                .contains("invalid variable")
        );
        assert_eq!(
            Template::parse("{\"a\":{}}").unwrap().literal().as_deref(),
            Some("{\"a\":{}}")
        );

        let base = HashMap::from([("sid".to_owned(), "a b/#".to_owned())]);
        let lists = Lists::default();
        let scope = Scope::new(&base, &lists);
        let vars = Vars {
            scope: &scope,
            index: Some("3".into()),
            item: None,
        };
        let t = Template::parse("/s/{{sid}}?n={{index}}").unwrap();
        assert_eq!(t.render(&vars, true).unwrap(), "/s/a%20b/%23?n=3");
        assert_eq!(t.render(&vars, false).unwrap(), "/s/a b/#?n=3");
        let e = Template::parse("{{item}}").unwrap().render(&vars, false);
        assert_eq!(e.unwrap_err().reason, "other: unknown variable {{item}}");
        let e = Template::parse("{{env.BENCH_JOURNEYS_SURELY_UNSET}}")
            .unwrap()
            .render(&vars, false);
        assert_eq!(
            e.unwrap_err().reason,
            "other: environment variable BENCH_JOURNEYS_SURELY_UNSET is not set"
        );
    }
}
