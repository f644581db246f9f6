//! An LLM API request's tokens: estimated from the request the way the vendors' own
//! limiters do (OpenAI counts a prompt's characters over four plus the most the answer
//! may take, `max_tokens`), settled from the answer's `usage`, which OpenAI's Chat
//! Completions and Responses APIs and Anthropic's Messages API each spell their own
//! way, and which a streamed answer carries in its events.

use serde::Deserialize;
use serde::de;

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
/// Read as it is parsed, without building the body's values: a long prompt costs
/// no allocation of its size.
pub fn estimate(body: &[u8]) -> Option<Tokens> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = de::Deserializer::deserialize_map(&mut de, RequestVisitor).ok()?;
    de.end().ok()?;
    let output = read.outputs.into_iter().flatten().next().unwrap_or(0);
    Some(Tokens {
        input: read.chars.div_ceil(CHARS_PER_TOKEN),
        output,
    })
}

/// What [`estimate`] reads of a request: its prompt's characters, and each of
/// [`OUTPUT_FIELDS`] it sets.
#[derive(Default)]
struct Read {
    chars: u64,
    outputs: [Option<u64>; OUTPUT_FIELDS.len()],
}

/// A top-level field of a request, as [`estimate`] sees it.
enum Field {
    Prompt,
    Output(usize),
    Other,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Field, D::Error> {
        struct Name;
        impl de::Visitor<'_> for Name {
            type Value = Field;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Field, E> {
                Ok(if PROMPT_FIELDS.contains(&name) {
                    Field::Prompt
                } else if let Some(i) = OUTPUT_FIELDS.iter().position(|f| *f == name) {
                    Field::Output(i)
                } else {
                    Field::Other
                })
            }
        }
        deserializer.deserialize_str(Name)
    }
}

struct RequestVisitor;

impl<'de> de::Visitor<'de> for RequestVisitor {
    type Value = Read;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut read = Read::default();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Prompt => read.chars += map.next_value_seed(Chars)?,
                Field::Output(i) => read.outputs[i] = map.next_value_seed(Count)?,
                Field::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(read)
    }
}

/// The characters of every string in a value (message texts, their roles and part
/// types alike: the vendors' counts include a few tokens of framing per message).
struct Chars;

impl<'de> de::DeserializeSeed<'de> for Chars {
    type Value = u64;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Chars {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
        Ok(text.chars().count() as u64)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut chars = 0u64;
        while let Some(n) = seq.next_element_seed(Chars)? {
            chars = chars.saturating_add(n);
        }
        Ok(chars)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut chars = 0u64;
        while map.next_key::<de::IgnoredAny>()?.is_some() {
            chars = chars.saturating_add(map.next_value_seed(Chars)?);
        }
        Ok(chars)
    }
}

/// A whole number of tokens, or `None` for any other value (which is skipped).
struct Count;

impl<'de> de::DeserializeSeed<'de> for Count {
    type Value = Option<u64>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Count {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Option<u64>, E> {
        Ok(Some(n))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Option<u64>, E> {
        Ok(u64::try_from(n).ok())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Option<u64>, A::Error> {
        de::IgnoredAny.visit_seq(seq).map(|_| None)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Option<u64>, A::Error> {
        de::IgnoredAny.visit_map(map).map(|_| None)
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
