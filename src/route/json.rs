//! A forward-only cursor over a JSON body for reading a few keys near the top of a
//! request or answer (DynamoDB's tables and keys, an LLM request's `model`). Values the caller does not want are skipped by matching
//! quotes and brackets, without decoding or allocating, and the caller stops as soon as
//! it has its answer, so the rest of a 16 MB batch is never looked at. It checks no more
//! than it needs: a malformed value it skips goes unnoticed, and any structure it cannot
//! follow ends the walk (the caller keeps what it found so far).

use std::borrow::Cow;

use super::Part;

/// What an object walk does after the caller has handled one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Go on to the next entry.
    Next,
    /// Skip the object's remaining entries and leave the cursor after its `}`.
    Done,
    /// Leave the cursor where it is and end the walk: the caller has its answer.
    Stop,
}

/// A JSON string as it appears in the body, quotes included.
#[derive(Clone, Copy, Debug)]
pub(super) struct Str<'a> {
    quoted: &'a [u8],
    escaped: bool,
}

impl<'a> Str<'a> {
    /// Whether the string is `name`; escapes are decoded first.
    pub(super) fn is(&self, name: &str) -> bool {
        if self.escaped {
            return self.decode().is_some_and(|s| s == name);
        }
        self.content() == name.as_bytes()
    }

    /// The string's text: borrowed from the body unless it has escapes.
    pub(super) fn decode(&self) -> Option<Cow<'a, str>> {
        if self.escaped {
            return serde_json::from_slice::<String>(self.quoted)
                .ok()
                .map(Cow::Owned);
        }
        std::str::from_utf8(self.content()).ok().map(Cow::Borrowed)
    }

    fn content(&self) -> &'a [u8] {
        &self.quoted[1..self.quoted.len() - 1]
    }
}

/// A position in a body.
#[derive(Debug)]
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub(super) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    /// Bytes looked at so far.
    pub(super) fn consumed(&self) -> usize {
        self.pos
    }

    fn peek(&mut self) -> Option<u8> {
        while let Some(&b) = self.bytes.get(self.pos) {
            if !b.is_ascii_whitespace() {
                return Some(b);
            }
            self.pos += 1;
        }
        None
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.peek()? == want).then(|| self.pos += 1)
    }

    /// Reads a string value; `None` (without moving) when the next value is not one.
    pub(super) fn string(&mut self) -> Option<Str<'a>> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos;
        let mut escaped = false;
        let mut i = start + 1;
        loop {
            match *self.bytes.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        Some(Str {
            quoted: &self.bytes[start..self.pos],
            escaped,
        })
    }

    /// Reads a string value, or skips any other value and gives `Some(None)`.
    pub(super) fn string_or_skip(&mut self) -> Option<Option<Str<'a>>> {
        if self.peek()? == b'"' {
            return self.string().map(Some);
        }
        self.skip_value().map(|()| None)
    }

    /// Skips one value of any kind.
    pub(super) fn skip_value(&mut self) -> Option<()> {
        self.raw_value().map(|_| ())
    }

    /// Skips one value and returns its bytes as written.
    pub(super) fn raw_value(&mut self) -> Option<&'a [u8]> {
        let start = match self.peek()? {
            b'"' => return self.string().map(|s| s.quoted),
            b'{' | b'[' => {
                let start = self.pos;
                self.pos += 1;
                self.close(1)?;
                start
            }
            _ => {
                let start = self.pos;
                while let Some(&b) = self.bytes.get(self.pos) {
                    if matches!(b, b',' | b'}' | b']' | b':') || b.is_ascii_whitespace() {
                        break;
                    }
                    self.pos += 1;
                }
                if self.pos == start {
                    return None;
                }
                start
            }
        };
        Some(&self.bytes[start..self.pos])
    }

    /// Moves past the bracket that closes `depth` open ones.
    fn close(&mut self, mut depth: usize) -> Option<()> {
        while depth > 0 {
            match *self.bytes.get(self.pos)? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                _ => {}
            }
            self.pos += 1;
        }
        Some(())
    }

    /// Whether the next value is `{}` or `[]`; the cursor does not move past it.
    pub(super) fn is_empty_container(&mut self) -> Option<bool> {
        let close = match self.peek()? {
            b'{' => b'}',
            b'[' => b']',
            _ => return Some(false),
        };
        let next = self.bytes[self.pos + 1..]
            .iter()
            .find(|b| !b.is_ascii_whitespace());
        Some(next == Some(&close))
    }

    /// Walks an object: `entry` gets each key with the cursor on its value, and must
    /// consume the value unless it answers [`Flow::Done`] or [`Flow::Stop`].
    pub(super) fn object(
        &mut self,
        mut entry: impl FnMut(&mut Cursor<'a>, Str<'a>) -> Option<Flow>,
    ) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            match entry(self, key)? {
                Flow::Next => {}
                Flow::Done => return self.close(1),
                Flow::Stop => return Some(()),
            }
            if self.after_entry(b'}')? {
                return Some(());
            }
        }
    }

    /// Walks an array: `element` must consume each element.
    pub(super) fn array(
        &mut self,
        mut element: impl FnMut(&mut Cursor<'a>) -> Option<()>,
    ) -> Option<()> {
        self.eat(b'[')?;
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            if self.after_entry(b']')? {
                return Some(());
            }
        }
    }

    /// Moves past the `,` or `close` after an entry; true when it was `close`.
    fn after_entry(&mut self, close: u8) -> Option<bool> {
        let b = self.peek()?;
        if b != b',' && b != close {
            return None;
        }
        self.pos += 1;
        Some(b == close)
    }
}

/// Finds the top-level `key`, hands its value to `read` and stops there.
pub(super) fn top_level<'a>(
    cursor: &mut Cursor<'a>,
    key: &str,
    mut read: impl FnMut(&mut Cursor<'a>) -> Option<()>,
) -> Option<()> {
    cursor.object(|c, name| {
        if name.is(key) {
            read(c)?;
            return Some(Flow::Stop);
        }
        c.skip_value().map(|()| Flow::Next)
    })
}

/// The top-level string `key` of a JSON object body (`"model"` of an LLM API request),
/// read as far as `body` goes; `None` when absent, not a string, or past the end.
pub(super) fn top_level_string<'a>(body: &'a [u8], key: &str) -> Option<Cow<'a, str>> {
    let mut found = None;
    let _ = top_level(&mut Cursor::new(body), key, |c| {
        found = c.string_or_skip()?.and_then(|s| s.decode());
        Some(())
    });
    found
}

/// FNV-1a over a JSON value's bytes, leaving out whitespace outside strings so the
/// same value hashes the same however a client spaces it.
pub(super) fn hash_value(raw: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut in_string = false;
    let mut escape = false;
    for &b in raw {
        if in_string {
            if escape {
                escape = false;
            } else if b == b'\\' {
                escape = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        } else if b.is_ascii_whitespace() {
            continue;
        }
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

/// The longest key [`FieldScan`] keeps to compare, as written: a field name is at
/// most 64 characters, and a key spelled longer (with many escapes) is taken to be
/// none it looks for (the held part, if it reaches the key, is still read whole).
const MAX_KEY: usize = 128;

/// Reads a JSON body's bytes as they arrive, chunk by chunk, for the top-level
/// fields a lane rule names (`body:model`), keeping a few bytes of state and never
/// the body: it tells when every field's value has passed (or the object has ended,
/// or the body is no object), so the caller holds the body only that far.
#[derive(Debug)]
pub struct FieldScan<'a> {
    /// The lane rule's parts; its `body:` ones are looked for (the first 64 parts).
    parts: &'a [Part],
    /// One bit per part looked for.
    wanted: u64,
    /// One bit per part whose value has passed.
    found: u64,
    phase: Phase,
    /// Nesting inside the current top-level value.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The key being read, as written (quotes left out), unless longer than [`MAX_KEY`].
    key: arrayvec::ArrayVec<u8, MAX_KEY>,
    key_too_long: bool,
    /// The field whose value is being read.
    current: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the body's `{`.
    Start,
    /// Before a key, or the object's `}`.
    Key,
    /// Inside a key's quotes.
    InKey,
    /// Before the `:` after a key.
    Colon,
    /// Inside a top-level value.
    Value,
    Done,
}

impl<'a> FieldScan<'a> {
    /// A scan for the `body:` parts of `parts`; `None` when there are none.
    pub fn new(parts: &'a [Part]) -> Option<FieldScan<'a>> {
        let wanted = (parts.iter().take(64).enumerate())
            .filter(|(_, part)| matches!(part, Part::Body(_)))
            .fold(0u64, |bits, (i, _)| bits | 1 << i);
        (wanted != 0).then(|| FieldScan {
            parts,
            wanted,
            found: 0,
            phase: Phase::Start,
            depth: 0,
            in_string: false,
            escaped: false,
            key: arrayvec::ArrayVec::new(),
            key_too_long: false,
            current: None,
        })
    }

    /// Reads the next bytes of the body; whether the scan is over: every field's
    /// value has passed, the top-level object has closed, or the body is not one.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut i = 0;
        while i < bytes.len() && self.phase != Phase::Done {
            if self.phase == Phase::Value && self.in_string && !self.escaped {
                // Most of a body is inside strings (prompt text, base64): jump to the
                // next quote or backslash.
                match bytes[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                    Some(at) => i += at,
                    None => return false,
                }
            }
            self.step(bytes[i]);
            i += 1;
        }
        self.is_done()
    }

    /// Whether the scan is over (see [`FieldScan::feed`]).
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    fn step(&mut self, b: u8) {
        match self.phase {
            Phase::Start | Phase::Key | Phase::Colon if b.is_ascii_whitespace() => {}
            Phase::Start if b == b'{' => self.phase = Phase::Key,
            Phase::Key if b == b'"' => {
                self.phase = Phase::InKey;
                self.key.clear();
                self.key_too_long = false;
            }
            // An empty object, or a comma between entries.
            Phase::Key if b == b'}' || b == b',' => {
                if b == b'}' {
                    self.phase = Phase::Done;
                }
            }
            Phase::InKey => self.key_byte(b),
            Phase::Colon if b == b':' => {
                self.phase = Phase::Value;
                self.depth = 0;
            }
            Phase::Value => self.value_byte(b),
            // Not a JSON object, or one this scan cannot follow.
            _ => self.phase = Phase::Done,
        }
    }

    fn key_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.phase = Phase::Colon;
            self.current = self.wanted();
            return;
        }
        if self.key.try_push(b).is_err() {
            self.key_too_long = true;
        }
    }

    /// The field the key just read names, if it is one not yet found.
    fn wanted(&self) -> Option<usize> {
        if self.key_too_long {
            return None;
        }
        let escaped = self.key.contains(&b'\\');
        let decoded = if escaped {
            let mut quoted = Vec::with_capacity(self.key.len() + 2);
            quoted.push(b'"');
            quoted.extend_from_slice(&self.key);
            quoted.push(b'"');
            serde_json::from_slice::<String>(&quoted).ok()
        } else {
            None
        };
        let key = match &decoded {
            Some(text) => text.as_bytes(),
            None if escaped => return None,
            None => &self.key[..],
        };
        let index = (self.parts.iter().take(64)).position(|part| match part {
            Part::Body(field) => field.as_bytes() == key,
            _ => false,
        })?;
        (self.found & 1 << index == 0).then_some(index)
    }

    fn value_byte(&mut self, b: u8) {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            return;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' if self.depth > 0 => self.depth -= 1,
            // The top-level object's own `}`, or the `,` after the value.
            b'}' | b',' if self.depth == 0 => {
                if let Some(index) = self.current.take() {
                    self.found |= 1 << index;
                }
                let all = self.found & self.wanted == self.wanted;
                self.phase = if b == b'}' || all {
                    Phase::Done
                } else {
                    Phase::Key
                };
            }
            _ => {}
        }
    }
}
