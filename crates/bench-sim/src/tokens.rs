//! Prompt token counting (a Hugging Face tokenizer or `ceil(bytes / 4)`) and generated words.

use std::path::{Path, PathBuf};

use crate::cache::{block_keys_from_bytes, block_keys_from_ids};
use crate::error::SimError;

/// Words the simulator "generates"; each is one token and needs no JSON escaping.
pub(crate) const WORDS: [&str; 32] = [
    " lorem",
    " ipsum",
    " dolor",
    " sit",
    " amet",
    " consectetur",
    " adipiscing",
    " elit",
    " sed",
    " do",
    " eiusmod",
    " tempor",
    " incididunt",
    " ut",
    " labore",
    " et",
    " dolore",
    " magna",
    " aliqua",
    " enim",
    " ad",
    " minim",
    " veniam",
    " quis",
    " nostrud",
    " exercitation",
    " ullamco",
    " laboris",
    " nisi",
    " aliquip",
    " ex",
    " ea",
];

/// How prompt tokens are counted.
pub(crate) enum TokenCounter {
    /// `ceil(bytes / 4)`; prefix-cache blocks are 4-byte pieces of the rendered text.
    Bytes,
    /// A Hugging Face tokenizer.
    Tokenizer {
        /// The loaded tokenizer.
        tokenizer: Box<tokenizers::Tokenizer>,
        /// Where it was loaded from.
        path: PathBuf,
    },
}

/// A counted prompt.
#[derive(Debug, Default)]
pub(crate) struct Counted {
    /// Prompt tokens.
    pub(crate) tokens: u32,
    /// Chained keys of its full blocks.
    pub(crate) keys: Vec<u64>,
}

impl TokenCounter {
    /// Loads the tokenizer at `path` (a file, or a directory holding `tokenizer.json`).
    pub(crate) fn load(path: Option<&Path>) -> Result<Self, SimError> {
        let Some(path) = path else {
            return Ok(Self::Bytes);
        };
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let tokenizer =
            tokenizers::Tokenizer::from_file(&file).map_err(|e| SimError::Tokenizer {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(Self::Tokenizer {
            tokenizer: Box::new(tokenizer),
            path: file,
        })
    }

    /// `"bytes/4"` or `"tokenizer:<path>"` (reported by `/v1/models`).
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Bytes => "bytes/4".to_owned(),
            Self::Tokenizer { path, .. } => format!("tokenizer:{}", path.display()),
        }
    }

    /// Whether counting is expensive enough to run off the async workers.
    pub(crate) fn is_tokenizer(&self) -> bool {
        matches!(self, Self::Tokenizer { .. })
    }

    /// Counts the tokens of `text` and keys its full blocks.
    pub(crate) fn count(&self, text: &str, block_size: u32) -> Result<Counted, String> {
        match self {
            Self::Bytes => Ok(Counted {
                tokens: u32::try_from(text.len().div_ceil(4)).unwrap_or(u32::MAX),
                keys: block_keys_from_bytes(text.as_bytes(), block_size),
            }),
            Self::Tokenizer { tokenizer, .. } => {
                let enc = tokenizer.encode(text, false).map_err(|e| e.to_string())?;
                let ids = enc.get_ids();
                Ok(Counted {
                    tokens: u32::try_from(ids.len()).unwrap_or(u32::MAX),
                    keys: block_keys_from_ids(ids, block_size),
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bytes_counter() {
        let c = TokenCounter::load(None).unwrap();
        assert_eq!(c.describe(), "bytes/4");
        let n = c.count(&"x".repeat(129), 16).unwrap();
        assert_eq!(n.tokens, 33);
        assert_eq!(n.keys.len(), 2);
    }

    #[test]
    fn tokenizer_counter_from_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,
            "decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},
            "unk_token":"[UNK]"}}"#;
        std::fs::write(dir.join("tokenizer.json"), json).unwrap();
        let c = TokenCounter::load(Some(&dir)).unwrap();
        assert!(c.describe().starts_with("tokenizer:"));
        let n = c.count("hello world hello other", 2).unwrap();
        assert_eq!(n.tokens, 4);
        assert_eq!(n.keys.len(), 2);
        let missing = TokenCounter::load(Some(&dir.join("nope.json")));
        assert!(matches!(missing, Err(SimError::Tokenizer { .. })));
    }
}
