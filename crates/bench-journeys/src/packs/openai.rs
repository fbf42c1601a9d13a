//! The `openai` pack: the operations every OpenAI-compatible server serves.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_transport::{ChatMessage, ChatRequest, Role};
use bytes::Bytes;

use crate::journey::{BoxFuture, Ctx, Env, Failure, Journey};

/// Output tokens asked for by the chat journeys (small: the pack times the API, not decoding).
/// Requests pin it with `max_completion_tokens` and `ignore_eos` (vLLM, SGLang, llama.cpp and
/// the simulator honour it), so every operation does the same work.
pub const MAX_TOKENS: u32 = 16;

/// The pack's journeys.
pub fn journeys() -> Vec<Arc<dyn Journey>> {
    vec![
        Arc::new(Get {
            name: "list_models",
            path: "/v1/models",
            description: "GET /v1/models",
        }),
        Arc::new(Chat {
            name: "chat_completion",
            description: "POST /v1/chat/completions, whole JSON answer (16 tokens)",
            mode: ChatMode::Whole,
        }),
        Arc::new(Chat {
            name: "stream_ttft",
            description: "POST /v1/chat/completions streamed: time to the first content delta",
            mode: ChatMode::Ttft,
        }),
        Arc::new(Chat {
            name: "stream_complete",
            description: "POST /v1/chat/completions streamed to [DONE] (16 tokens)",
            mode: ChatMode::Complete,
        }),
        Arc::new(Interrupt),
        Arc::new(Get {
            name: "metrics_scrape",
            path: "/metrics",
            description: "GET /metrics (Prometheus text)",
        }),
    ]
}

/// The model to ask for: the first one `GET /v1/models` lists.
async fn first_model(env: &Env) -> Result<String, Failure> {
    let r = env.client.get("/v1/models", None).await?;
    if !r.status.is_success() {
        return Err(Failure::status(r.status.as_u16(), "GET /v1/models"));
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body)
        .map_err(|e| Failure::other(format!("GET /v1/models: {e}")))?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Failure::other("GET /v1/models listed no model"))
}

/// One user message in the shape of `env`'s endpoint, output pinned to `max_tokens`.
fn chat_body(env: &Env, model: &str, stream: bool, max_tokens: u32) -> Result<Bytes, Failure> {
    let mut req = ChatRequest::new(
        model,
        vec![ChatMessage::new(Role::User, "Say hello in a few words.")],
    );
    req.pin_output(max_tokens, false);
    if !stream {
        req.stream = false;
        req.stream_options = None;
    }
    Ok(req.to_endpoint_body(env.endpoint)?)
}

fn model_of(ctx: &Ctx) -> Result<&str, Failure> {
    ctx.downcast_ref::<String>()
        .map(String::as_str)
        .ok_or_else(|| Failure::other("setup context is not a model name"))
}

/// A `GET` whose only check is a success status.
struct Get {
    name: &'static str,
    path: &'static str,
    description: &'static str,
}

impl Journey for Get {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn concurrency_safe(&self) -> bool {
        true
    }
    fn measure<'a>(
        &'a self,
        env: &'a Env,
        _ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
        Box::pin(async move {
            let r = env.client.get(self.path, None).await?;
            if !r.status.is_success() {
                return Err(Failure::status(
                    r.status.as_u16(),
                    format!("GET {}", self.path),
                ));
            }
            Ok(None)
        })
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ChatMode {
    Whole,
    Ttft,
    Complete,
}

struct Chat {
    name: &'static str,
    description: &'static str,
    mode: ChatMode,
}

impl Journey for Chat {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn concurrency_safe(&self) -> bool {
        true
    }
    fn setup<'a>(&'a self, env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
        Box::pin(async move { Ok(Box::new(first_model(env).await?) as Ctx) })
    }
    fn measure<'a>(
        &'a self,
        env: &'a Env,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
        Box::pin(async move {
            let stream = self.mode != ChatMode::Whole;
            let body = chat_body(env, model_of(ctx)?, stream, MAX_TOKENS)?;
            let o = env
                .client
                .chat_body(body, stream, &env.generation_options()?)
                .await?;
            match self.mode {
                ChatMode::Ttft => o
                    .ttft
                    .map(Some)
                    .ok_or_else(|| Failure::other("no content delta")),
                _ => Ok(None),
            }
        })
    }
}

struct Interrupt;

impl Journey for Interrupt {
    fn name(&self) -> &str {
        "interrupt"
    }
    fn description(&self) -> &str {
        "start a stream, drop it at the first delta: time until a new request succeeds"
    }
    fn setup<'a>(&'a self, env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
        Box::pin(async move { Ok(Box::new(first_model(env).await?) as Ctx) })
    }
    fn measure<'a>(
        &'a self,
        env: &'a Env,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
        Box::pin(async move {
            let model = model_of(ctx)?;
            let opts = env.generation_options()?;
            // A long generation, cut at its first delta.
            env.client
                .chat_interrupt(chat_body(env, model, true, 4096)?, &opts)
                .await?;
            let t0 = Instant::now();
            env.client
                .chat_body(chat_body(env, model, false, 1)?, false, &opts)
                .await?;
            Ok(Some(t0.elapsed()))
        })
    }
}
