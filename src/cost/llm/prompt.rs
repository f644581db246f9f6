//! A request's tokens before it is sent, read as its body is parsed, without building
//! its values: the prompt's text at about four characters a token, its images,
//! sounds and files by the vendors' rules (`media.rs`), and the most the answer may
//! take (`max_tokens`). A body held only in part is costed from what was read, and
//! the rest at the same tokens a byte, bounded.

use serde::de::{self, DeserializeSeed};

use super::media::{FILE_TOKENS, Kind, Media, kind_of_type};
use super::{CHARS_PER_TOKEN, Tokens};
use crate::cost::shape::{Any, Shape};

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

/// The most the part of a body easeoff did not read adds to its estimate: GPT-4o's
/// context window, which no prompt passes (a larger model's answer settles the rest).
pub const UNREAD_TOKENS: u64 = 128_000;

/// What a request will cost at most: its prompt (text, and media by their rules), and
/// its `max_tokens` (0 when it sets none). `None` for a body that is not a JSON
/// object. A long prompt costs no allocation of its size.
pub fn estimate(body: &[u8]) -> Option<Tokens> {
    let mut read = Read::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    de::Deserializer::deserialize_map(&mut de, RequestVisitor(&mut read)).ok()?;
    de.end().ok()?;
    Some(read.tokens())
}

/// [`estimate`] of a body of `length` bytes (when known) of which `held` is the
/// start. When it is all of it, the estimate; else what `held` says (a string it
/// cuts counted as text, or as the one piece of media it starts) and the rest at the
/// tokens a byte of the rest of `held`, at most [`UNREAD_TOKENS`] (a rest of unknown
/// length is taken to be as long as `held`). `None` for a body that is not a JSON
/// object.
pub fn estimate_held(held: &[u8], length: Option<u64>) -> Option<Tokens> {
    let whole = length.is_some_and(|n| n <= held.len() as u64);
    if whole {
        return estimate(held);
    }
    let mut read = Read::default();
    let mut de = serde_json::Deserializer::from_slice(held);
    match de::Deserializer::deserialize_map(&mut de, RequestVisitor(&mut read)) {
        Ok(()) => return de.end().ok().map(|()| read.tokens()),
        Err(e) if e.classify() == serde_json::error::Category::Eof => {}
        Err(_) => return None,
    }
    let cut = cut_string(held).map_or(0, |start| read.cut(held, start));
    let mut tokens = read.tokens();
    let rest = length.map_or(held.len() as u64, |n| n - held.len() as u64);
    let per_byte = u128::from(tokens.input) * u128::from(rest) / (held.len().max(1) as u128);
    let rest = u64::try_from(per_byte)
        .unwrap_or(u64::MAX)
        .min(UNREAD_TOKENS);
    tokens.input = tokens.input.saturating_add(rest).saturating_add(cut);
    Some(tokens)
}

/// What [`estimate`] reads of a request: its prompt's characters and media's
/// tokens, and each of [`OUTPUT_FIELDS`] it sets.
#[derive(Default)]
struct Read {
    tally: Tally,
    outputs: [Option<u64>; OUTPUT_FIELDS.len()],
}

impl Read {
    fn tokens(&self) -> Tokens {
        Tokens {
            input: (self.tally.chars.div_ceil(CHARS_PER_TOKEN)).saturating_add(self.tally.media),
            output: self.outputs.into_iter().flatten().next().unwrap_or(0),
        }
    }

    /// Counts the string `held` ends inside, from its opening quote at `start`: its
    /// characters if text; if it is the media a `data:` URL or a `data` field
    /// starts, that media's tokens are returned, to be added once (a piece of media
    /// costs what it costs however many of its bytes were read).
    fn cut(&mut self, held: &[u8], start: usize) -> u64 {
        let text = &held[start + 1..];
        let key = key_before(held, start);
        let binary = matches!(key, Some(b"data" | b"file_data")) && !text.contains(&b' ');
        match Media::url(text) {
            Some(media) => media.tokens(),
            None if binary => Media::data(text).tokens(),
            None => {
                // UTF-8 characters: the bytes that do not continue one.
                let chars = text.iter().filter(|&&b| b & 0xc0 != 0x80).count() as u64;
                self.tally.chars = self.tally.chars.saturating_add(chars);
                0
            }
        }
    }
}

/// Where the string `bytes` ends inside begins (its opening quote), if it does.
fn cut_string(bytes: &[u8]) -> Option<usize> {
    let (mut open, mut escaped) = (None, false);
    for (i, &b) in bytes.iter().enumerate() {
        match (open, b) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), b'\\') => escaped = true,
            (Some(_), b'"') => open = None,
            (None, b'"') => open = Some(i),
            _ => {}
        }
    }
    open
}

/// The key whose value starts at `start` (`"key": "...`), if one does.
fn key_before(bytes: &[u8], start: usize) -> Option<&[u8]> {
    let before = bytes[..start].trim_ascii_end().strip_suffix(b":")?;
    let before = before.trim_ascii_end().strip_suffix(b"\"")?;
    let open = before.iter().rposition(|&b| b == b'"')?;
    Some(&before[open + 1..])
}

/// The prompt's characters of text and tokens of media so far.
#[derive(Default)]
struct Tally {
    chars: u64,
    media: u64,
}

impl Tally {
    fn text(&mut self, text: &str) {
        self.chars = self.chars.saturating_add(text.chars().count() as u64);
    }

    /// Keeps `more` as the media still to be costed; media it displaces is costed now.
    fn keep(&mut self, found: &mut Option<Media>, more: Option<Media>) {
        if let Some(earlier) = more.and_then(|more| found.replace(more)) {
            self.cost(earlier);
        }
    }

    fn cost(&mut self, media: Media) {
        self.media = self.media.saturating_add(media.tokens());
    }
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

/// Reads a request into a [`Read`] the caller keeps, so that a body cut short still
/// tells what came before the cut.
struct RequestVisitor<'r>(&'r mut Read);

impl<'de> de::Visitor<'de> for RequestVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let read = self.0;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Prompt => {
                    let tally = &mut read.tally;
                    let found = map.next_value_seed(Any(Prompt::new(tally, Under::Other)))?;
                    if let Some(media) = found.media {
                        read.tally.cost(media);
                    }
                }
                Field::Output(i) => read.outputs[i] = map.next_value_seed(Any(Count))?,
                Field::Other => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The key a value is under, as far as media goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Under {
    Other,
    /// `image_url` (a link, a `data:` URL or an object holding one) and its `url`.
    Image,
    /// `file_data`: a file's base64 or `data:` URL.
    FileData,
}

/// What a value hands up to its part: media no part has costed yet (a part's `type`
/// says what it is), and whether a `data` field in it held text.
#[derive(Default)]
struct Found {
    media: Option<Media>,
    text: bool,
}

/// The strings of a prompt value (message texts, roles and part types alike: the
/// vendors' counts include a few tokens of framing per message) and its media: a
/// `data:` URL anywhere, an `image_url`, base64 under `data` or `file_data`. A part's
/// `type` costs the media in it by its kind; `detail` and `media_type` tell more.
struct Prompt<'r> {
    tally: &'r mut Tally,
    under: Under,
}

impl<'r> Prompt<'r> {
    fn new(tally: &'r mut Tally, under: Under) -> Prompt<'r> {
        Prompt { tally, under }
    }
}

/// A field of a content part that tells about its media.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Type,
    Detail,
    MediaType,
    ImageUrl,
    Url,
    Data,
    FileData,
    Other,
}

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Key;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl de::Visitor<'_> for Key {
    type Value = Key;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
        Ok(match key {
            "type" => Key::Type,
            "detail" => Key::Detail,
            "media_type" => Key::MediaType,
            "image_url" => Key::ImageUrl,
            "url" => Key::Url,
            "data" => Key::Data,
            "file_data" => Key::FileData,
            _ => Key::Other,
        })
    }
}

/// What a part's `type`, `detail` or `media_type` says about its media.
#[derive(Clone, Copy, Default)]
struct Says {
    /// A part of this kind (`type`), which costs the media in it.
    part: Option<Kind>,
    /// A `document` part.
    document: bool,
    /// Its `data` is text (`"type": "text"`, a `text/*` media type).
    text: bool,
    /// Its media's kind, if nothing else says (`media_type`).
    hint: Option<Kind>,
    /// `detail`.
    low: Option<bool>,
}

impl Says {
    fn read(&mut self, key: Key, word: &str) {
        match key {
            Key::Type => match word {
                "image" => self.part = Some(Kind::AnthropicImage),
                "image_url" | "input_image" => self.part = Some(Kind::OpenAiImage),
                "input_audio" => self.part = Some(Kind::Audio),
                "file" | "input_file" => self.part = Some(Kind::File),
                "document" => self.document = true,
                "text" => self.text = true,
                _ => {}
            },
            Key::Detail => self.low = Some(word == "low"),
            Key::MediaType => match kind_of_type(word.as_bytes()) {
                Some(kind) => self.hint = Some(kind),
                None => self.text = true,
            },
            _ => {}
        }
    }
}

/// A `type`, `detail` or `media_type` value: counted as text, and read for what it
/// says.
struct Word<'r> {
    tally: &'r mut Tally,
    key: Key,
    says: &'r mut Says,
}

impl Shape<'_> for Word<'_> {
    type Value = ();

    fn other(self) {}

    fn text<E: de::Error>(self, word: &str) -> Result<(), E> {
        self.tally.text(word);
        self.says.read(self.key, word);
        Ok(())
    }
}

/// A `data` field's string: base64 (no spaces) kept as media, with its characters in
/// case its part says it is text; anything else is prompt.
struct DataField<'r>(&'r mut Tally);

impl<'de> Shape<'de> for DataField<'_> {
    type Value = (Found, Option<u64>);

    fn other(self) -> (Found, Option<u64>) {
        (Found::default(), None)
    }

    fn text<E: de::Error>(self, text: &str) -> Result<(Found, Option<u64>), E> {
        if text.contains(' ') {
            self.0.text(text);
            return Ok(self.other());
        }
        let media = Media::url(text.as_bytes()).unwrap_or_else(|| Media::data(text.as_bytes()));
        let found = Found {
            media: Some(media),
            text: false,
        };
        Ok((found, Some(text.chars().count() as u64)))
    }

    fn list<A: de::SeqAccess<'de>>(self, seq: A) -> Result<(Found, Option<u64>), A::Error> {
        Ok((Prompt::new(self.0, Under::Other).list(seq)?, None))
    }

    fn object<A: de::MapAccess<'de>>(self, map: A) -> Result<(Found, Option<u64>), A::Error> {
        Ok((Prompt::new(self.0, Under::Other).object(map)?, None))
    }
}

impl<'de> Shape<'de> for Prompt<'_> {
    type Value = Found;

    fn other(self) -> Found {
        Found::default()
    }

    fn text<E: de::Error>(self, text: &str) -> Result<Found, E> {
        let media = match Media::url(text.as_bytes()) {
            Some(media) => Some(media),
            None if self.under == Under::Image => Some(Media::of(Kind::OpenAiImage)),
            None if self.under == Under::FileData => Some(Media::data(text.as_bytes())),
            None => None,
        };
        if media.is_none() {
            self.tally.text(text);
        }
        Ok(Found { media, text: false })
    }

    fn list<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        let mut found = Found::default();
        while let Some(more) =
            seq.next_element_seed(Any(Prompt::new(&mut *self.tally, Under::Other)))?
        {
            self.tally.keep(&mut found.media, more.media);
            found.text |= more.text;
        }
        Ok(found)
    }

    fn object<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let tally = self.tally;
        let mut found = Found::default();
        let mut says = Says::default();
        // The `data` field's media and characters, until the part says which it is.
        let mut data = None;
        while let Some(key) = map.next_key_seed(Key::Other)? {
            let under = match key {
                Key::Type | Key::Detail | Key::MediaType => {
                    let word = Word {
                        tally: &mut *tally,
                        key,
                        says: &mut says,
                    };
                    map.next_value_seed(Any(word))?;
                    continue;
                }
                Key::Data => {
                    let (more, chars) = map.next_value_seed(Any(DataField(&mut *tally)))?;
                    match chars {
                        Some(chars) => data = more.media.map(|media| (media, chars)),
                        None => tally.keep(&mut found.media, more.media),
                    }
                    found.text |= more.text;
                    continue;
                }
                Key::ImageUrl => Under::Image,
                Key::Url if self.under == Under::Image => Under::Image,
                Key::FileData => Under::FileData,
                Key::Url | Key::Other => Under::Other,
            };
            let more = map.next_value_seed(Any(Prompt::new(&mut *tally, under)))?;
            tally.keep(&mut found.media, more.media);
            found.text |= more.text;
        }
        if let Some((mut media, chars)) = data {
            if says.text {
                tally.chars = tally.chars.saturating_add(chars);
                found.text = true;
            } else {
                if media.kind == Kind::Unknown {
                    media.kind = says.hint.unwrap_or(Kind::Unknown);
                }
                tally.keep(&mut found.media, Some(media));
            }
        }
        if self.under == Under::Image && found.media.is_none() {
            found.media = Some(Media::of(Kind::OpenAiImage));
        }
        if let Some(media) = &mut found.media {
            media.low = media.low.or(says.low);
        }
        if let Some(kind) = says.part {
            // A part of a kind: its media (or, with none in the request, a file id or
            // a link's) costed by that kind's rule.
            let mut media = found.media.take().unwrap_or(Media::of(kind));
            media.kind = kind;
            media.low = media.low.or(says.low);
            tally.cost(media);
        } else if says.document && !found.text {
            // A document that is not text (a PDF's base64, a link to one): one file.
            found.media = None;
            tally.media = tally.media.saturating_add(FILE_TOKENS);
        }
        Ok(found)
    }
}

/// A whole number of tokens, or `None` for any other value (which is skipped).
struct Count;

impl Shape<'_> for Count {
    type Value = Option<u64>;

    fn other(self) -> Option<u64> {
        None
    }

    fn unsigned(self, n: u64) -> Option<u64> {
        Some(n)
    }

    fn signed(self, n: i64) -> Option<u64> {
        u64::try_from(n).ok()
    }
}
