//! The single-item operations (PutItem, UpdateItem, DeleteItem, GetItem, Query, Scan),
//! costed as their body is read: no JSON tree is built and nothing is allocated, so a
//! lane that paces in capacity units pays for costing each request about what routing
//! it does. Batches and transactions, and bodies this reader does not take, go to
//! `general.rs`.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{WRITE_UNIT, base64_len, number_size, units as rounded};

/// The capacity units of a single-item request, by the same rules as
/// [`super::estimate`]; `None` for another operation, or a body this reader does not
/// take (not JSON, or a value of the wrong type), which the general path then reads.
pub fn units(operation: &str, body: &[u8]) -> Option<f64> {
    if !matches!(
        operation,
        "PutItem" | "UpdateItem" | "DeleteItem" | "GetItem" | "Query" | "Scan"
    ) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = de.deserialize_map(Request).ok()?;
    de.end().ok()?;
    Some(match operation {
        "PutItem" => rounded(read.item, WRITE_UNIT),
        "UpdateItem" => rounded(read.key + read.values, WRITE_UNIT),
        "DeleteItem" => 1.0,
        _ if read.consistent => 1.0,
        _ => 0.5,
    })
}

/// What a single-item request's body says about its cost.
#[derive(Default)]
struct Read {
    item: u64,
    key: u64,
    values: u64,
    consistent: bool,
}

/// The request's top-level object.
struct Request;

impl<'de> Visitor<'de> for Request {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a DynamoDB request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut read = Read::default();
        while let Some(field) = map.next_key_seed(Named(&[
            "Item",
            "Key",
            "ExpressionAttributeValues",
            "ConsistentRead",
        ]))? {
            match field {
                Some(0) => read.item = map.next_value_seed(Attributes)?.bytes,
                Some(1) => read.key = map.next_value_seed(Attributes)?.bytes,
                Some(2) => read.values = map.next_value_seed(Attributes)?.bytes,
                Some(3) => read.consistent = map.next_value_seed(IsTrue)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(read)
    }
}

/// A key looked up among `names` (its index), without copying it.
pub(super) struct Named(pub(super) &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Named {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Named {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|name| *name == s))
    }
}

/// Whether a value is `true` (anything else is not).
struct IsTrue;

impl<'de> DeserializeSeed<'de> for IsTrue {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IsTrue {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a boolean")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<bool, E> {
        Ok(b)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

/// A map of attribute names to values (an item, a key, a `M`): the bytes of names and
/// values, and how many there are.
struct Attributes;

/// What [`Attributes`] counted.
struct Counted {
    bytes: u64,
    entries: u64,
}

impl<'de> DeserializeSeed<'de> for Attributes {
    type Value = Counted;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Counted, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Attributes {
    type Value = Counted;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of attribute values")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counted, A::Error> {
        let mut counted = Counted {
            bytes: 0,
            entries: 0,
        };
        while let Some(name) = map.next_key_seed(Text(str_len))? {
            counted.bytes += name + map.next_value_seed(Attribute)?;
            counted.entries += 1;
        }
        Ok(counted)
    }
}

/// One attribute value, `{"<type>": <value>}`, sized without its name.
struct Attribute;

impl<'de> DeserializeSeed<'de> for Attribute {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Attribute {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an attribute value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        const TYPES: &[&str] = &["S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M"];
        let Some(kind) = map.next_key_seed(Named(TYPES))? else {
            return Ok(0);
        };
        let size = match kind {
            Some(0) => map.next_value_seed(Text(str_len))?,
            Some(1) => map.next_value_seed(Text(number_size))?,
            Some(2) => map.next_value_seed(Text(base64_len))?,
            Some(3 | 4) => map.next_value::<IgnoredAny>().map(|_| 1)?,
            Some(5) => map.next_value_seed(Texts(str_len))?,
            Some(6) => map.next_value_seed(Texts(number_size))?,
            Some(7) => map.next_value_seed(Texts(base64_len))?,
            Some(8) => map.next_value_seed(List)?,
            Some(9) => {
                let m = map.next_value_seed(Attributes)?;
                3 + m.entries + m.bytes
            }
            _ => map.next_value::<IgnoredAny>().map(|_| 0)?,
        };
        // DynamoDB takes one type per value; anything after it is not sized.
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(size)
    }
}

fn str_len(s: &str) -> u64 {
    s.len() as u64
}

/// A string, sized by a rule.
struct Text(fn(&str) -> u64);

impl<'de> DeserializeSeed<'de> for Text {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Text {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
        Ok((self.0)(s))
    }
}

/// A set of strings, each sized by a rule, summed.
struct Texts(fn(&str) -> u64);

impl<'de> DeserializeSeed<'de> for Texts {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Texts {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a set of strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut sum = 0;
        while let Some(size) = seq.next_element_seed(Text(self.0))? {
            sum += size;
        }
        Ok(sum)
    }
}

/// A `L`: 3 bytes, plus one and the size of each element.
struct List;

impl<'de> DeserializeSeed<'de> for List {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for List {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of attribute values")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut sum = 3;
        while let Some(size) = seq.next_element_seed(Attribute)? {
            sum += 1 + size;
        }
        Ok(sum)
    }
}
