//! Token counting: a Hugging Face tokenizer (the embedded Qwen3 one by default), or ~4
//! characters per token when none is wanted.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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

/// A token counter.
///
/// The embedded Qwen3 tokenizer is loaded on first use (its 11 MB of JSON take a few hundred
/// milliseconds of CPU to parse), so a plan whose every count is known by construction
/// (`--dataset random` without a shared system prompt) never loads it; a tokenizer from a file
/// is loaded by [`TokenCounter::load`], so a bad file is refused up front.
pub struct TokenCounter {
    inner: Inner,
    name: String,
    /// Whether [`crate::text::filler`] text is one token per word here, checked once.
    filler_exact: OnceLock<bool>,
}

enum Inner {
    Chars,
    /// A tokenizer already loaded (from a file).
    Loaded(tokenizers::Tokenizer),
    /// The embedded tokenizer, loaded on first use.
    Embedded(OnceLock<Result<tokenizers::Tokenizer, String>>),
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

fn load_embedded() -> Result<tokenizers::Tokenizer, String> {
    let json = gunzip(QWEN3_GZ).map_err(|e| e.to_string())?;
    tokenizers::Tokenizer::from_bytes(&json).map_err(|e| e.to_string())
}

/// Words in the seeded sample [`TokenCounter::filler_is_exact`] counts.
const FILLER_SAMPLE_WORDS: u32 = 4096;

impl TokenCounter {
    /// The counter `spec` names: a tokenizer file is read and parsed now, the embedded
    /// tokenizer on first use.
    pub fn load(spec: &TokenizerSpec) -> Result<TokenCounter, PlanError> {
        let (inner, name) = match spec {
            TokenizerSpec::Chars => (Inner::Chars, "chars/4".to_owned()),
            TokenizerSpec::Qwen3 => (Inner::Embedded(OnceLock::new()), "hf:qwen3".to_owned()),
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
                (Inner::Loaded(tok), format!("hf:{}", p.display()))
            }
        };
        Ok(TokenCounter {
            inner,
            name,
            filler_exact: OnceLock::new(),
        })
    }

    /// The tokenizer, loading the embedded one now if it is not yet (`None`: the character
    /// estimate, or an embedded tokenizer that failed to load, which [`TokenCounter::ready`]
    /// reports).
    fn tokenizer(&self) -> Option<&tokenizers::Tokenizer> {
        match &self.inner {
            Inner::Chars => None,
            Inner::Loaded(t) => Some(t),
            Inner::Embedded(cell) => cell.get_or_init(load_embedded).as_ref().ok(),
        }
    }

    /// Loads the tokenizer now if it is not yet; an error names why it cannot be used.
    pub fn ready(&self) -> Result<(), PlanError> {
        match &self.inner {
            Inner::Embedded(cell) => cell
                .get_or_init(load_embedded)
                .as_ref()
                .map(|_| ())
                .map_err(|e| PlanError::tokenizer("embedded qwen3", e)),
            _ => Ok(()),
        }
    }

    /// Whether the tokenizer has been loaded (always, for one read from a file; the embedded
    /// one once something was counted).
    pub fn is_loaded(&self) -> bool {
        match &self.inner {
            Inner::Chars => false,
            Inner::Loaded(_) => true,
            Inner::Embedded(cell) => cell.get().is_some_and(Result::is_ok),
        }
    }

    /// Whether this is the embedded Qwen3 tokenizer, loaded or not.
    pub fn is_embedded(&self) -> bool {
        matches!(self.inner, Inner::Embedded(_))
    }

    /// What counts tokens: `hf:qwen3`, `hf:<path>` or `chars/4`. Recorded in plans.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when this is a real tokenizer (not the character estimate).
    pub fn is_tokenizer(&self) -> bool {
        !matches!(self.inner, Inner::Chars)
    }

    /// Tokens in `text` (no special tokens added).
    pub fn count(&self, text: &str) -> u32 {
        match self.tokenizer() {
            Some(t) => t
                .encode_fast(text, false)
                .map(|e| e.len() as u32)
                .unwrap_or_else(|_| chars_estimate(text)),
            None => chars_estimate(text),
        }
    }

    /// Counts many texts, in parallel on rayon's pool (one thread per CPU this process may
    /// run on).
    pub fn count_all(&self, texts: &[&str]) -> Vec<u32> {
        // Load once before the threads start, not racing in each of them.
        let _ = self.tokenizer();
        texts.par_iter().map(|t| self.count(t)).collect()
    }

    /// The token ids of `text` (tokenizer only).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        let t = self.tokenizer()?;
        t.encode_fast(text, false)
            .ok()
            .map(|e| e.get_ids().to_vec())
    }

    /// Text of `ids` (tokenizer only).
    pub fn decode(&self, ids: &[u32]) -> Option<String> {
        self.tokenizer()?.decode(ids, false).ok()
    }

    /// Whether [`crate::text::filler`] text is exactly one token per word under this counter,
    /// so synthetic text needs no counting pass: every word of [`crate::text::WORDS`] must be
    /// one token alone, and a seeded 4,096-word sample of filler must count 4,096 (no merges
    /// across words). Checked once per counter and remembered.
    ///
    /// The embedded Qwen3 tokenizer is not loaded for this: the embedded file is fixed, and the
    /// same check against it runs in the test suite (`tests/it/plan.rs`,
    /// `synthetic_counts_are_known_by_construction_and_exact`), which fails if either the file
    /// or the words change. When the embedded tokenizer is loaded anyway, it is
    /// checked at run time too. The character estimate is never exact (a word is not four
    /// characters), but it is cheap to count.
    pub fn filler_is_exact(&self) -> bool {
        *self.filler_exact.get_or_init(|| match &self.inner {
            Inner::Chars => false,
            Inner::Embedded(cell) if cell.get().is_none() => true,
            _ => self.check_filler(),
        })
    }

    /// The check behind [`TokenCounter::filler_is_exact`], run against the tokenizer (loading
    /// the embedded one).
    pub fn check_filler(&self) -> bool {
        if self.tokenizer().is_none() {
            return false;
        }
        crate::text::WORDS.iter().all(|w| self.count(w) == 1)
            && self.count(&crate::text::filler(0x5eed_f111, FILLER_SAMPLE_WORDS))
                == FILLER_SAMPLE_WORDS
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
