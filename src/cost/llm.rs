//! An LLM API request's tokens: estimated from the request the way the vendors' own
//! limiters do (OpenAI counts a prompt's characters over four plus the most the answer
//! may take, `max_tokens`), settled from the answer's `usage`, which OpenAI's Chat
//! Completions and Responses APIs and Anthropic's Messages API each spell their own
//! way, and which a streamed answer carries in its events.

use serde::Deserialize;
use serde_json::Value;

/// Tokens in and out of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Prompt (input) tokens.
    pub input: u64,
    /// Answer (output) tokens.
    pub output: u64,
}

impl Tokens {
    /// Input and output together, as a tokens-per-minute limit counts them.
    pub fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// The request fields whose text is prompt: chat messages, a system prompt, a
/// completion's prompt, a Responses or embeddings input, instructions, tools.
const PROMPT_FIELDS: [&str; 6] = [
    "messages",
    "system",
    "prompt",
    "input",
    "instructions",
    "tools",
];

/// The fields that bound the answer's length, by API.
const OUTPUT_FIELDS: [&str; 3] = ["max_completion_tokens", "max_output_tokens", "max_tokens"];

/// About four characters a token, rounded up: OpenAI's documented rule of thumb, and
/// what its limiter counts before the model has seen the prompt.
pub const CHARS_PER_TOKEN: u64 = 4;

/// What a request will cost at most: its prompt's characters over four, and its
/// `max_tokens` (0 when it sets none). `None` for a body that is not a JSON object.
pub fn estimate(body: &[u8]) -> Option<Tokens> {
    let Value::Object(request) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let chars: u64 = PROMPT_FIELDS
        .iter()
        .filter_map(|field| request.get(*field))
        .map(text_chars)
        .sum();
    let output = OUTPUT_FIELDS
        .iter()
        .find_map(|field| request.get(*field).and_then(Value::as_u64))
        .unwrap_or(0);
    Some(Tokens {
        input: chars.div_ceil(CHARS_PER_TOKEN),
        output,
    })
}

/// The characters of every string in a value (message texts, their roles and part
/// types alike: the vendors' counts include a few tokens of framing per message).
fn text_chars(value: &Value) -> u64 {
    match value {
        Value::String(s) => s.chars().count() as u64,
        Value::Array(items) => items.iter().map(text_chars).sum(),
        Value::Object(fields) => fields.values().map(text_chars).sum(),
        _ => 0,
    }
}

/// `usage` as the three APIs spell it.
#[derive(Debug, Default, Deserialize)]
struct Usage {
    /// Chat Completions.
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    /// Responses and Anthropic.
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    /// Anthropic: tokens written to the prompt cache count against input limits.
    cache_creation_input_tokens: Option<u64>,
}

impl Usage {
    fn tokens(&self) -> Option<Tokens> {
        let input = self.prompt_tokens.or(self.input_tokens);
        let output = self.completion_tokens.or(self.output_tokens);
        if input.is_none() && output.is_none() {
            return None;
        }
        Some(Tokens {
            input: input
                .unwrap_or(0)
                .saturating_add(self.cache_creation_input_tokens.unwrap_or(0)),
            output: output.unwrap_or(0),
        })
    }
}

/// The tokens a whole (not streamed) answer reports in its `usage`; `None` without one.
pub fn usage(body: &[u8]) -> Option<Tokens> {
    #[derive(Deserialize)]
    struct Answer {
        usage: Option<Usage>,
    }
    serde_json::from_slice::<Answer>(body).ok()?.usage?.tokens()
}

/// The tokens a `usage` object reports, parsed from the start of `value` (what follows
/// it is left alone: the rest of a body, cut off or not).
pub fn usage_value(value: &[u8]) -> Option<Tokens> {
    let mut de = serde_json::Deserializer::from_slice(value);
    Usage::deserialize(&mut de).ok()?.tokens()
}

/// The longest event line kept while looking for `usage`; longer ones (a large chunk of
/// answer text) are skipped, never buffered whole.
const MAX_LINE: usize = 64 * 1024;

/// Reads a streamed (server-sent events) answer chunk by chunk for the tokens it
/// reports: OpenAI's last chunk (`stream_options.include_usage`), Responses'
/// `response.completed`, Anthropic's `message_start` (input) and `message_delta`
/// (output, a running count). Holds at most one line of 64 KiB.
#[derive(Debug, Default)]
pub struct StreamUsage {
    line: Vec<u8>,
    /// The current line is over [`MAX_LINE`] and is being skipped.
    skipping: bool,
    input: Option<u64>,
    output: Option<u64>,
}

impl StreamUsage {
    /// Reads the next chunk of the answer's body.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.take(&rest[..end]);
            self.end_line();
            rest = &rest[end + 1..];
        }
        self.take(rest);
    }

    /// What the stream has reported so far; `None` if it reported nothing.
    pub fn tokens(&self) -> Option<Tokens> {
        if self.input.is_none() && self.output.is_none() {
            return None;
        }
        Some(Tokens {
            input: self.input.unwrap_or(0),
            output: self.output.unwrap_or(0),
        })
    }

    fn take(&mut self, bytes: &[u8]) {
        if self.skipping || self.line.len() + bytes.len() > MAX_LINE {
            self.skipping = true;
            self.line.clear();
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        if !std::mem::take(&mut self.skipping)
            && let Some(data) = line.strip_prefix(b"data:")
        {
            self.event(data.trim_ascii());
        }
        // The buffer is kept for the next line.
        self.line = line;
        self.line.clear();
    }

    fn event(&mut self, data: &[u8]) {
        // Most events are answer text: look for the word before parsing.
        if !data.windows(7).any(|w| w == b"\"usage\"") {
            return;
        }
        #[derive(Deserialize)]
        struct Event {
            usage: Option<Usage>,
            /// Anthropic's `message_start` and Responses' `response.completed`.
            message: Option<Nested>,
            response: Option<Nested>,
        }
        #[derive(Deserialize)]
        struct Nested {
            usage: Option<Usage>,
        }
        let Ok(event) = serde_json::from_slice::<Event>(data) else {
            return;
        };
        let nested = event.message.or(event.response).and_then(|n| n.usage);
        for usage in [nested, event.usage].into_iter().flatten() {
            if let Some(input) = usage.prompt_tokens.or(usage.input_tokens) {
                let cache = usage.cache_creation_input_tokens.unwrap_or(0);
                self.input = Some(input.saturating_add(cache));
            }
            if let Some(output) = usage.completion_tokens.or(usage.output_tokens) {
                self.output = Some(output);
            }
        }
    }
}

#[cfg(test)]
mod tests;
