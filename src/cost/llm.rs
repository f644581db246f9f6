//! An LLM API request's tokens: estimated from the request the way the vendors' own
//! limiters do (OpenAI counts a prompt's characters over four plus the most the answer
//! may take, `max_tokens`; images by their size, `media.rs`), settled from the
//! answer's `usage`, which OpenAI's Chat Completions and Responses APIs and
//! Anthropic's Messages API each spell their own way, and which a streamed answer
//! carries in its events.

use serde::Deserialize;
use serde::de::{self, DeserializeSeed};

use super::shape::{Any, Shape};

mod media;
mod prompt;

pub use media::{AUDIO_TOKENS, FILE_TOKENS};
pub use prompt::{UNREAD_TOKENS, estimate, estimate_held};

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

/// About four characters a token, rounded up: OpenAI's documented rule of thumb, and
/// what its limiter counts before the model has seen the prompt.
pub const CHARS_PER_TOKEN: u64 = 4;

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

/// The most of an event line's start, and of its end, kept while looking for
/// `usage`: a longer line (a large chunk of answer text, or Responses'
/// `response.completed`, which repeats the whole answer before its `usage`) is read
/// through, never buffered whole.
const MAX_LINE: usize = 64 * 1024;

/// The fields of a streamed `delta` whose strings are answer text (a message's,
/// a tool call's arguments, a thinking block's); other strings in it (a type, a
/// role, a tool's name) are not counted.
const TEXT_FIELDS: [&str; 7] = [
    "text",
    "partial_json",
    "thinking",
    "content",
    "arguments",
    "refusal",
    "reasoning_content",
];

/// Reads a streamed (server-sent events) answer chunk by chunk for the tokens it
/// reports: OpenAI's last chunk (`stream_options.include_usage`), Responses'
/// `response.completed`, Anthropic's `message_start` (input) and `message_delta`
/// (output, a running count). Until the stream reports its final usage it counts
/// the answer text its deltas carry, so a stream cut short settles at least the
/// output it showed (at [`CHARS_PER_TOKEN`]). Holds at most the first and last
/// `MAX_LINE` bytes of one line.
#[derive(Debug, Default)]
pub struct StreamUsage {
    line: Vec<u8>,
    /// The last bytes of a line longer than [`MAX_LINE`] (whose first ones are in
    /// `line`), at most 2 × [`MAX_LINE`] before trimming to `MAX_LINE`.
    tail: Vec<u8>,
    /// The current line's length, when it is past [`MAX_LINE`].
    long: usize,
    input: Option<u64>,
    output: Option<u64>,
    /// Characters of answer text the deltas carried.
    seen: u64,
    /// The stream reported its final usage (OpenAI's last chunk, `message_delta`,
    /// `response.completed`), which counts what the answer took, shown or not.
    ended: bool,
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

    /// What the stream has reported so far; `None` if it reported nothing. Before
    /// its final usage, the output is at least the text it showed.
    pub fn tokens(&self) -> Option<Tokens> {
        if self.input.is_none() && self.output.is_none() {
            return None;
        }
        let mut output = self.output.unwrap_or(0);
        if !self.ended {
            output = output.max(self.seen.div_ceil(CHARS_PER_TOKEN));
        }
        Some(Tokens {
            input: self.input.unwrap_or(0),
            output,
        })
    }

    fn take(&mut self, bytes: &[u8]) {
        if self.long == 0 && self.line.len() + bytes.len() <= MAX_LINE {
            self.keep(bytes);
            return;
        }
        let mut rest = bytes;
        if self.long == 0 {
            let room = MAX_LINE - self.line.len();
            self.keep(&bytes[..room]);
            self.long = self.line.len();
            rest = &bytes[room..];
            // Never more than this: the tail is trimmed before it would grow past it.
            self.tail.reserve_exact(2 * MAX_LINE);
        }
        self.long += rest.len();
        let rest = &rest[rest.len().saturating_sub(MAX_LINE)..];
        if self.tail.len() + rest.len() > 2 * MAX_LINE {
            self.tail.drain(..self.tail.len() + rest.len() - MAX_LINE);
        }
        self.tail.extend_from_slice(rest);
    }

    /// Appends to the line's start, its buffer growing as a `Vec`'s would but never
    /// past [`MAX_LINE`].
    fn keep(&mut self, bytes: &[u8]) {
        let needed = self.line.len() + bytes.len();
        if needed > self.line.capacity() {
            let target = needed.max(2 * self.line.capacity()).min(MAX_LINE);
            self.line.reserve_exact(target - self.line.len());
        }
        self.line.extend_from_slice(bytes);
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        if let Some(data) = line.strip_prefix(b"data:") {
            if self.long == 0 {
                self.event(data.trim_ascii());
            } else {
                self.long_event(data);
            }
        }
        // The buffers are kept for the next line.
        self.line = line;
        self.line.clear();
        self.tail.clear();
        self.long = 0;
    }

    fn event(&mut self, data: &[u8]) {
        // Most events are answer text: look for the words before parsing.
        let has = |word: &[u8]| data.windows(word.len()).any(|w| w == word);
        let usage = has(b"\"usage\"");
        if !usage && !has(b"\"delta\"") {
            return;
        }
        #[derive(Deserialize)]
        struct Event {
            usage: Option<Usage>,
            /// Anthropic's `message_start` (the usage so far) and Responses'
            /// `response.completed` (the final one).
            message: Option<Nested>,
            response: Option<Nested>,
            /// Anthropic's and Responses' answer text.
            delta: Option<Said>,
            /// Chat Completions' answer text.
            choices: Option<Vec<Choice>>,
        }
        #[derive(Deserialize)]
        struct Nested {
            usage: Option<Usage>,
        }
        #[derive(Deserialize)]
        struct Choice {
            delta: Option<Said>,
        }
        let Ok(event) = serde_json::from_slice::<Event>(data) else {
            return;
        };
        let shown = (event.choices.into_iter().flatten())
            .filter_map(|choice| choice.delta)
            .chain(event.delta)
            .fold(0u64, |sum, said| sum.saturating_add(said.0));
        self.seen = self.seen.saturating_add(shown);
        if let Some(usage) = event.message.and_then(|m| m.usage) {
            self.report(&usage, false);
        }
        if let Some(usage) = event.response.and_then(|r| r.usage) {
            self.report(&usage, true);
        }
        if let Some(usage) = event.usage {
            self.report(&usage, true);
        }
    }

    /// A line past [`MAX_LINE`]: the last `usage` in its end (or start) is its final
    /// one; a delta that long counts its length as text.
    fn long_event(&mut self, start: &[u8]) {
        let usage = [&self.tail[..], start].into_iter().find_map(|part| {
            let value = value_of(part, b"\"usage\"")?;
            Usage::deserialize(&mut serde_json::Deserializer::from_slice(value)).ok()
        });
        match usage {
            Some(usage) => self.report(&usage, true),
            None if start.windows(7).any(|w| w == b"\"delta\"") => {
                self.seen = self.seen.saturating_add(self.long as u64);
            }
            None => {}
        }
    }

    fn report(&mut self, usage: &Usage, last: bool) {
        if let Some(input) = usage.prompt_tokens.or(usage.input_tokens) {
            let cache = usage.cache_creation_input_tokens.unwrap_or(0);
            self.input = Some(input.saturating_add(cache));
        }
        if let Some(output) = usage.completion_tokens.or(usage.output_tokens) {
            self.output = Some(output);
            self.ended |= last;
        }
    }
}

/// The characters of answer text in a streamed `delta`: all of it if a string, else
/// the strings under [`TEXT_FIELDS`] at any depth.
struct Said(u64);

impl<'de> Deserialize<'de> for Said {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Said, D::Error> {
        Any(Text(true)).deserialize(d).map(Said)
    }
}

/// [`Said`]'s reader; its flag: a string here is answer text.
struct Text(bool);

impl<'de> Shape<'de> for Text {
    type Value = u64;

    fn other(self) -> u64 {
        0
    }

    fn text<E: de::Error>(self, text: &str) -> Result<u64, E> {
        Ok(if self.0 {
            text.chars().count() as u64
        } else {
            0
        })
    }

    fn list<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut chars = 0u64;
        while let Some(n) = seq.next_element_seed(Any(Text(self.0)))? {
            chars = chars.saturating_add(n);
        }
        Ok(chars)
    }

    fn object<A: de::MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut chars = 0u64;
        while let Some(text) = map.next_key_seed(IsText)? {
            chars = chars.saturating_add(map.next_value_seed(Any(Text(text)))?);
        }
        Ok(chars)
    }
}

/// Whether a key is one of [`TEXT_FIELDS`], read without copying it.
struct IsText;

impl<'de> de::DeserializeSeed<'de> for IsText {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl de::Visitor<'_> for IsText {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(TEXT_FIELDS.contains(&key))
    }
}

/// The bytes after the last `"key":` in `bytes` that is not inside a string's escape.
pub(super) fn value_of<'a>(bytes: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let mut end = bytes.len();
    while let Some(at) = find_last(&bytes[..end], key) {
        end = at;
        if at > 0 && bytes[at - 1] == b'\\' {
            continue;
        }
        let rest = bytes[at + key.len()..].trim_ascii_start();
        if let Some(value) = rest.strip_prefix(b":") {
            return Some(value.trim_ascii_start());
        }
    }
    None
}

fn find_last(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    bytes.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests;
