//! Reading a JSON value of any kind by a rule that cares about a few kinds: the
//! costing readers (a DynamoDB body's items, an LLM request's prompt, a stream's
//! deltas) walk bodies with serde without building them, and each kind a rule has no
//! method for is skipped unread and counts as the rule's [`Shape::other`].

use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// How a rule reads a value of any JSON kind: each kind it has no method for counts
/// as [`Shape::other`] (and is skipped unread).
pub(super) trait Shape<'de>: Sized {
    type Value;

    /// What a value of a kind the rule does not take counts.
    fn other(self) -> Self::Value;

    fn boolean(self, _: bool) -> Self::Value {
        self.other()
    }

    fn unsigned(self, _: u64) -> Self::Value {
        self.other()
    }

    fn signed(self, _: i64) -> Self::Value {
        self.other()
    }

    fn text<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.other())
    }

    /// A string borrowed from the body (one without escapes).
    fn borrowed<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
        self.text(s)
    }

    fn list<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        Ok(self.other())
    }

    fn object<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        IgnoredAny.visit_map(map)?;
        Ok(self.other())
    }
}

/// A [`Shape`] as a serde seed and visitor.
pub(super) struct Any<T>(pub(super) T);

impl<'de, T: Shape<'de>> DeserializeSeed<'de> for Any<T> {
    type Value = T::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Shape<'de>> Visitor<'de> for Any<T> {
    type Value = T::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<T::Value, E> {
        Ok(self.0.boolean(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<T::Value, E> {
        Ok(self.0.signed(n))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<T::Value, E> {
        Ok(self.0.unsigned(n))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<T::Value, E> {
        Ok(self.0.other())
    }

    fn visit_unit<E: de::Error>(self) -> Result<T::Value, E> {
        Ok(self.0.other())
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<T::Value, E> {
        self.0.borrowed(s)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T::Value, E> {
        self.0.text(s)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T::Value, A::Error> {
        self.0.list(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T::Value, A::Error> {
        self.0.object(map)
    }
}
