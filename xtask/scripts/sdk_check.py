"""The official `openai` and `anthropic` Python SDKs as clients of `bench sim`.

Run by `cargo xtask it sdk` (xtask/src/it.rs), once per simulator it starts:

    sdk_check.py BASE_URL REQUEST_LOG [--ca CA_FILE] [--label LABEL]

Streams chat completions, Responses, Messages and completions from the simulator at BASE_URL,
plainly and with a conversation that carries tool calls and tool results (each API's own
shape), through the SDKs' own stream parsers: any event an SDK cannot parse raises. Then holds
what each SDK accumulated (answer text, reasoning, token usage) against the simulator's request
log (started with --request-log REQUEST_LOG --log-text), joined by the x-session-id header each
request carries. Prints one JSON line per request and a last line `{"summary": ...}` with the
events each SDK parsed; exits 1 naming every mismatch.
"""

import argparse
import json
import ssl
import sys
import time

import anthropic
import openai

MODEL = "bench-sim"
MAX_TOKENS = 12
TOOL = {
    "name": "read_file",
    "description": "Read a file of the repository.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
ASK = "Summarize the lexer and say what it does with tabs."
CALL_ARGS = json.dumps({"path": "src/lexer.rs"})
RESULT = "fn lex(input: &str) -> Vec<Token> { /* tabs are whitespace */ }"


def chat_messages(tools):
    msgs = [{"role": "system", "content": "You are a coding agent."}]
    msgs.append({"role": "user", "content": ASK})
    if tools:
        msgs.append({
            "role": "assistant",
            "content": None,
            "tool_calls": [{
                "id": "call_1",
                "type": "function",
                "function": {"name": TOOL["name"], "arguments": CALL_ARGS},
            }],
        })
        msgs.append({"role": "tool", "tool_call_id": "call_1", "content": RESULT})
    return msgs


def chat(client, session, tools):
    """Chat completions, streamed with usage; reasoning from `delta.reasoning_content`."""
    kwargs = {}
    if tools:
        kwargs["tools"] = [{"type": "function", "function": TOOL}]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=chat_messages(tools),
        stream=True,
        stream_options={"include_usage": True},
        max_completion_tokens=MAX_TOKENS,
        extra_body={"ignore_eos": True},
        extra_headers={"x-session-id": session},
        **kwargs,
    )
    got = {"events": 0, "text": "", "reasoning": "", "usage": None, "finish": None}
    for chunk in stream:
        got["events"] += 1
        for choice in chunk.choices:
            delta = choice.delta
            got["text"] += delta.content or ""
            extra = delta.model_extra or {}
            got["reasoning"] += extra.get("reasoning_content") or ""
            got["finish"] = choice.finish_reason or got["finish"]
        if chunk.usage is not None:
            cached = chunk.usage.prompt_tokens_details
            got["usage"] = {
                "prompt": chunk.usage.prompt_tokens,
                "completion": chunk.usage.completion_tokens,
                "cached": cached.cached_tokens if cached else 0,
            }
    return got


def responses(client, session, tools):
    """Responses, streamed; text and reasoning from the deltas, checked against the final
    response its terminal event (`response.completed`, or `response.incomplete` at the output
    cap) carries."""
    items = [{"role": "user", "content": ASK}]
    kwargs = {"instructions": "You are a coding agent."}
    if tools:
        kwargs["tools"] = [{"type": "function", **TOOL}]
        items += [
            {"type": "function_call", "call_id": "call_1", "name": TOOL["name"],
             "arguments": CALL_ARGS},
            {"type": "function_call_output", "call_id": "call_1", "output": RESULT},
        ]
    stream = client.responses.create(
        model=MODEL,
        input=items,
        stream=True,
        max_output_tokens=MAX_TOKENS,
        extra_body={"ignore_eos": True},
        extra_headers={"x-session-id": session},
        **kwargs,
    )
    got = {"events": 0, "text": "", "reasoning": "", "usage": None, "finish": None}
    final = None
    for ev in stream:
        got["events"] += 1
        if ev.type == "response.output_text.delta":
            got["text"] += ev.delta
        elif ev.type in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            got["reasoning"] += ev.delta
        elif ev.type in ("response.completed", "response.incomplete"):
            # An answer cut at max_output_tokens ends `incomplete`, as OpenAI's does.
            final = ev.response
    if final is None:
        raise AssertionError("no response.completed or response.incomplete event")
    if final.output_text != got["text"]:
        raise AssertionError(
            f"the final response's output_text {final.output_text!r} is not the deltas' "
            f"{got['text']!r}")
    got["finish"] = final.status
    if final.status == "incomplete":
        got["finish"] += f" ({final.incomplete_details.reason})"
    cached = final.usage.input_tokens_details
    got["usage"] = {
        "prompt": final.usage.input_tokens,
        "completion": final.usage.output_tokens,
        "cached": cached.cached_tokens if cached else 0,
    }
    return got


def messages(client, session, tools):
    """Anthropic Messages through the SDK's stream helper, which accumulates the message."""
    msgs = [{"role": "user", "content": ASK}]
    kwargs = {}
    if tools:
        kwargs["tools"] = [{
            "name": TOOL["name"],
            "description": TOOL["description"],
            "input_schema": TOOL["parameters"],
        }]
        msgs += [
            {"role": "assistant", "content": [{
                "type": "tool_use", "id": "toolu_1", "name": TOOL["name"],
                "input": json.loads(CALL_ARGS),
            }]},
            {"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": "toolu_1", "content": RESULT,
            }]},
        ]
    got = {"events": 0, "text": "", "reasoning": "", "usage": None, "finish": None}
    with client.messages.stream(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        system="You are a coding agent.",
        messages=msgs,
        extra_body={"ignore_eos": True},
        extra_headers={"x-session-id": session},
        **kwargs,
    ) as stream:
        for ev in stream:
            got["events"] += 1
            if ev.type == "text":
                got["text"] += ev.text
            elif ev.type == "thinking":
                got["reasoning"] += ev.thinking
        final = stream.get_final_message()
    text = "".join(b.text for b in final.content if b.type == "text")
    thinking = "".join(b.thinking for b in final.content if b.type == "thinking")
    if (text, thinking) != (got["text"], got["reasoning"]):
        raise AssertionError(
            f"the final message ({text!r}, {thinking!r}) is not its events' "
            f"({got['text']!r}, {got['reasoning']!r})")
    got["finish"] = final.stop_reason
    u = final.usage
    cached = u.cache_read_input_tokens or 0
    # Anthropic's input_tokens leave out the tokens read from the cache.
    got["usage"] = {
        "prompt": u.input_tokens + cached,
        "completion": u.output_tokens,
        "cached": cached,
    }
    return got


def completions(client, session, tools):
    """Completions, streamed with usage: reasoning tokens arrive as plain text."""
    assert not tools
    stream = client.completions.create(
        model=MODEL,
        prompt=f"User: {ASK}\n\nAssistant:",
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=MAX_TOKENS,
        extra_body={"ignore_eos": True},
        extra_headers={"x-session-id": session},
    )
    got = {"events": 0, "text": "", "reasoning": "", "usage": None, "finish": None}
    for chunk in stream:
        got["events"] += 1
        for choice in chunk.choices:
            got["text"] += choice.text or ""
            got["finish"] = choice.finish_reason or got["finish"]
        if chunk.usage is not None:
            cached = chunk.usage.prompt_tokens_details
            got["usage"] = {
                "prompt": chunk.usage.prompt_tokens,
                "completion": chunk.usage.completion_tokens,
                "cached": cached.cached_tokens if cached else 0,
            }
    return got


def read_log(path, sessions, timeout_s=10.0):
    """The simulator's log lines of `sessions` (it writes a line as each request ends)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = {}
        with open(path, encoding="utf-8") as f:
            for raw in f:
                line = json.loads(raw)
                if line.get("session") in sessions:
                    lines.setdefault(line["session"], []).append(line)
        if all(s in lines for s in sessions) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("request_log")
    ap.add_argument("--ca")
    ap.add_argument("--label", default="plain")
    args = ap.parse_args()
    http = {}
    if args.ca:
        ctx = ssl.create_default_context(cafile=args.ca)
        http = {"openai": openai.DefaultHttpxClient(verify=ctx),
                "anthropic": anthropic.DefaultHttpxClient(verify=ctx)}
    oai = openai.OpenAI(base_url=args.base_url + "/v1", api_key="sk-sdk-check", max_retries=0,
                        **({"http_client": http["openai"]} if http else {}))
    ant = anthropic.Anthropic(base_url=args.base_url, api_key="sk-ant-sdk-check", max_retries=0,
                              **({"http_client": http["anthropic"]} if http else {}))
    cases = [
        ("openai", "chat", chat, oai, False),
        ("openai", "chat", chat, oai, True),
        ("openai", "responses", responses, oai, False),
        ("openai", "responses", responses, oai, True),
        ("openai", "completions", completions, oai, False),
        ("anthropic", "messages", messages, ant, False),
        ("anthropic", "messages", messages, ant, True),
    ]
    results = []
    problems = []
    for sdk, api, fn, client, tools in cases:
        session = f"sdk-{args.label}-{api}-{'tools' if tools else 'plain'}"
        try:
            got = fn(client, session, tools)
        except Exception as e:  # an SDK that cannot parse a stream raises: that is the finding
            problems.append(f"{session}: {sdk} SDK: {type(e).__name__}: {e}")
            continue
        results.append((sdk, api, session, got))
    log = read_log(args.request_log, {r[2] for r in results})
    events = {}
    for sdk, api, session, got in results:
        lines = log.get(session, [])
        if len(lines) != 1:
            problems.append(f"{session}: {len(lines)} lines in the simulator's log, not 1")
            continue
        line = lines[0]
        want = {
            "text": line.get("text"),
            "reasoning": line.get("reasoning"),
            "usage": {
                "prompt": line["prompt_tokens"],
                "completion": line["completion_tokens"],
                "cached": line["cached_tokens"],
            },
        }
        if api == "completions":
            # No reasoning shape: the reasoning tokens are answer text.
            want["text"] = (want["reasoning"] or "") + (want["text"] or "")
            want["reasoning"] = ""
        for key in ("text", "reasoning", "usage"):
            if got[key] != want[key]:
                problems.append(
                    f"{session}: the {sdk} SDK's {key} {got[key]!r} is not the simulator's "
                    f"{want[key]!r}")
        if line["status"] != 200 or line["completion_tokens"] != MAX_TOKENS:
            problems.append(
                f"{session}: the simulator logged status {line['status']} and "
                f"{line['completion_tokens']} tokens (want 200 and {MAX_TOKENS})")
        events[sdk] = events.get(sdk, 0) + got["events"]
        print(json.dumps({"session": session, "sdk": sdk, "api": api, "events": got["events"],
                          "finish": got["finish"], "usage": got["usage"],
                          "text_chars": len(got["text"]),
                          "reasoning_chars": len(got["reasoning"])}))
    print(json.dumps({"summary": {"label": args.label, "requests": len(results),
                                  "events": events, "problems": problems}}))
    for p in problems:
        print(f"sdk_check: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
