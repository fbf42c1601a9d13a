//! Token counting: a Hugging Face tokenizer (the embedded Qwen3 one by default), or ~4
//! characters per token when none is wanted.

use std::io::Read;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::PlanError;

/// The Qwen3 tokenizer, gzip-compressed, shipped in `fixtures/tokenizer/qwen3/` (Apache-2.0,
/// see its SOURCE.txt) and compiled in so the default needs no file and no download.
static QWEN3_GZ: &[u8] = include_bytes!("../../../fixtures/tokenizer/qwen3/tokenizer.json.gz");

/// Which tokenizer to use.
///
/// On disk: `"qwen3"`, `"chars"` or `{"path": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerSpec {
    /// The embedded Qwen3 tokenizer.
    #[default]
    Qwen3,
    /// A `tokenizer.json` (optionally `.gz`), or a model directory holding one.
    Path(PathBuf),
    /// No tokenizer: ~4 characters per token.
    Chars,
}

impl std::str::FromStr for TokenizerSpec {
    type Err = std::convert::Infallible;

    /// `qwen3` (default), `none` (≈ 4 characters per token), or a path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "qwen3" | "default" => TokenizerSpec::Qwen3,
            "none" | "chars" => TokenizerSpec::Chars,
            p => TokenizerSpec::Path(PathBuf::from(p)),
        })
    }
}

/// A loaded token counter.
pub struct TokenCounter {
    inner: Option<tokenizers::Tokenizer>,
    name: String,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCounter")
            .field("name", &self.name)
            .finish()
    }
}

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() * 6);
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

impl TokenCounter {
    /// Loads the counter `spec` names.
    pub fn load(spec: &TokenizerSpec) -> Result<TokenCounter, PlanError> {
        match spec {
            TokenizerSpec::Chars => Ok(TokenCounter {
                inner: None,
                name: "chars/4".into(),
            }),
            TokenizerSpec::Qwen3 => {
                let json =
                    gunzip(QWEN3_GZ).map_err(|e| PlanError::tokenizer("embedded qwen3", e))?;
                let tok = tokenizers::Tokenizer::from_bytes(&json)
                    .map_err(|e| PlanError::tokenizer("embedded qwen3", e))?;
                Ok(TokenCounter {
                    inner: Some(tok),
                    name: "hf:qwen3".into(),
                })
            }
            TokenizerSpec::Path(p) => {
                let file = resolve_tokenizer_file(p)?;
                let bytes = std::fs::read(&file)
                    .map_err(|e| PlanError::tokenizer(&file.display().to_string(), e))?;
                let json = if file.extension().is_some_and(|e| e == "gz") {
                    gunzip(&bytes)
                        .map_err(|e| PlanError::tokenizer(&file.display().to_string(), e))?
                } else {
                    bytes
                };
                let tok = tokenizers::Tokenizer::from_bytes(&json).map_err(|e| {
                    PlanError::tokenizer(
                        &file.display().to_string(),
                        format!("not a tokenizer.json: {e}"),
                    )
                })?;
                Ok(TokenCounter {
                    inner: Some(tok),
                    name: format!("hf:{}", p.display()),
                })
            }
        }
    }

    /// What counts tokens: `hf:qwen3`, `hf:<path>` or `chars/4`. Recorded in plans.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when this is a real tokenizer (not the character estimate).
    pub fn is_tokenizer(&self) -> bool {
        self.inner.is_some()
    }

    /// Tokens in `text` (no special tokens added).
    pub fn count(&self, text: &str) -> u32 {
        match &self.inner {
            Some(t) => t
                .encode_fast(text, false)
                .map(|e| e.len() as u32)
                .unwrap_or_else(|_| chars_estimate(text)),
            None => chars_estimate(text),
        }
    }

    /// Counts many texts in parallel.
    pub fn count_all(&self, texts: &[&str]) -> Vec<u32> {
        texts.par_iter().map(|t| self.count(t)).collect()
    }

    /// The token ids of `text` (tokenizer only).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        let t = self.inner.as_ref()?;
        t.encode_fast(text, false)
            .ok()
            .map(|e| e.get_ids().to_vec())
    }

    /// Text of `ids` (tokenizer only).
    pub fn decode(&self, ids: &[u32]) -> Option<String> {
        self.inner.as_ref()?.decode(ids, false).ok()
    }
}

/// ~4 characters per token, rounded up.
pub fn chars_estimate(text: &str) -> u32 {
    (text.chars().count() as u32).div_ceil(4)
}

fn resolve_tokenizer_file(p: &Path) -> Result<PathBuf, PlanError> {
    if p.is_dir() {
        for name in ["tokenizer.json", "tokenizer.json.gz"] {
            let f = p.join(name);
            if f.is_file() {
                return Ok(f);
            }
        }
        return Err(PlanError::tokenizer(
            &p.display().to_string(),
            "directory has no tokenizer.json",
        ));
    }
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    Err(PlanError::tokenizer(
        &p.display().to_string(),
        "no such file or directory",
    ))
}
