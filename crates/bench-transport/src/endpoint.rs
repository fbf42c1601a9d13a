//! Which API a request speaks: [`Endpoint`].
//!
//! The four shapes, their streams and their non-streamed answers are fixed by the wire contract
//! shared with the simulator (`docs/endpoints.md`); [`crate::ChatStreamConsumer::with_endpoint`]
//! parses each of them.
//!
//! ```
//! use bench_transport::Endpoint;
//!
//! let e: Endpoint = "messages".parse().unwrap();
//! assert_eq!(e.path(), "/v1/messages");
//! assert_eq!(Endpoint::default(), Endpoint::Chat);
//! let err = "chats".parse::<Endpoint>().unwrap_err();
//! assert!(err.to_string().contains("chat, responses, messages, completions"));
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An inference API (serialized in lowercase: `"chat"`, `"responses"`, `"messages"`,
/// `"completions"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// OpenAI chat completions, `POST /v1/chat/completions`: streamed as `data:` chunks with a
    /// `choices[].delta`, ended by `data: [DONE]`.
    #[default]
    Chat,
    /// OpenAI Responses, `POST /v1/responses`: streamed as typed events (`event:` plus
    /// `data: {"type":…}`), ended by `response.completed` or `response.incomplete`.
    Responses,
    /// Anthropic Messages, `POST /v1/messages`: streamed as typed events, ended by
    /// `message_stop`.
    Messages,
    /// OpenAI legacy completions, `POST /v1/completions`: streamed as `data:` chunks with a
    /// `choices[].text`, ended by `data: [DONE]`.
    Completions,
}

impl Endpoint {
    /// Every endpoint, in declaration order.
    pub const ALL: [Endpoint; 4] = [
        Endpoint::Chat,
        Endpoint::Responses,
        Endpoint::Messages,
        Endpoint::Completions,
    ];

    /// The request path: `/v1/chat/completions`, `/v1/responses`, `/v1/messages` or
    /// `/v1/completions`.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Responses => "/v1/responses",
            Endpoint::Messages => "/v1/messages",
            Endpoint::Completions => "/v1/completions",
        }
    }

    /// The name used on the command line and in stored specs: `chat`, `responses`, `messages`
    /// or `completions`.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::Completions => "completions",
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that names no [`Endpoint`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown endpoint '{given}' (expected one of: chat, responses, messages, completions)")]
pub struct ParseEndpointError {
    given: String,
}

impl ParseEndpointError {
    /// The string that was given.
    pub fn given(&self) -> &str {
        &self.given
    }
}

impl FromStr for Endpoint {
    type Err = ParseEndpointError;

    /// Parses an endpoint [`name`](Endpoint::name), ignoring ASCII case and surrounding
    /// whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Endpoint::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseEndpointError {
                given: s.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_paths_and_serde_agree() {
        let paths: Vec<_> = Endpoint::ALL.iter().map(|e| e.path()).collect();
        assert_eq!(
            paths,
            [
                "/v1/chat/completions",
                "/v1/responses",
                "/v1/messages",
                "/v1/completions"
            ]
        );
        for e in Endpoint::ALL {
            assert_eq!(e.name().parse::<Endpoint>().unwrap(), e);
            assert_eq!(e.to_string(), e.name());
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.name()));
            assert_eq!(serde_json::from_str::<Endpoint>(&json).unwrap(), e);
        }
        assert_eq!(
            " Responses ".parse::<Endpoint>().unwrap(),
            Endpoint::Responses
        );
        assert_eq!(Endpoint::default(), Endpoint::Chat);
    }

    #[test]
    fn unknown_names_list_the_choices() {
        let e = "/v1/chat/completions".parse::<Endpoint>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown endpoint '/v1/chat/completions' (expected one of: chat, responses, messages, completions)"
        );
        assert_eq!(e.given(), "/v1/chat/completions");
        assert!(serde_json::from_str::<Endpoint>("\"Chat\"").is_err());
        assert!("".parse::<Endpoint>().is_err());
    }
}
