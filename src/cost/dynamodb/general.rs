//! Any operation's cost, batches and transactions included, read as the body is
//! parsed: no JSON tree is built, so a 16 MiB batch costs a few allocations per table
//! (its table names, and serde's scratch for a string with escapes), not its size.
//!
//! It takes any JSON object and gives what a tree of it would: a value of the wrong
//! type counts nothing, an attribute value is sized by its alphabetically first
//! type, batches list their tables in name order and a table named twice counts
//! once, by its last entry; a transaction's tables come in the order they first
//! appear. (A key repeated in one object, which a tree keeps only the last of, is
//! read each time.)

use std::borrow::Cow;
use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::super::shape::{Any, Shape};
use super::single::Named;
use super::{READ_UNIT, TableCost, WRITE_UNIT, base64_len, number_size, units};

/// What a request costs each table it touches (see [`super::estimate`]); `None` for an
/// operation that uses no table capacity or a body that is not a JSON object.
pub fn estimate(operation: &str, body: &[u8]) -> Option<Vec<TableCost>> {
    let operation = Operation::of(operation)?;
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = de.deserialize_map(Request(operation)).ok()?;
    de.end().ok()?;
    let one = |units| {
        Some(vec![TableCost {
            table: read.table.clone().into_owned(),
            units,
        }])
    };
    let read_units = if read.consistent { 1.0 } else { 0.5 };
    match operation {
        Operation::Put => one(units(read.item, WRITE_UNIT)),
        Operation::Update => one(units(read.key + read.values, WRITE_UNIT)),
        Operation::Delete => one(1.0),
        Operation::Read => one(read_units),
        Operation::BatchWrite | Operation::BatchGet => Some(by_name(read.tables)),
        Operation::TransactWrite | Operation::TransactGet => Some(by_first_seen(read.tables)),
    }
}

/// The size DynamoDB charges for an item (a JSON map of attribute values); `None`
/// for a body that is not one.
#[cfg(test)]
pub fn item_size(item: &[u8]) -> Option<u64> {
    let mut de = serde_json::Deserializer::from_slice(item);
    let size = Any(Attributes).deserialize(&mut de).ok()?;
    de.end().ok()?;
    size
}

/// The operations that use table capacity, by how their bodies are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    Put,
    Update,
    Delete,
    /// GetItem, Query, Scan.
    Read,
    BatchWrite,
    BatchGet,
    TransactWrite,
    TransactGet,
}

impl Operation {
    fn of(name: &str) -> Option<Operation> {
        Some(match name {
            "PutItem" => Operation::Put,
            "UpdateItem" => Operation::Update,
            "DeleteItem" => Operation::Delete,
            "GetItem" | "Query" | "Scan" => Operation::Read,
            "BatchWriteItem" => Operation::BatchWrite,
            "BatchGetItem" => Operation::BatchGet,
            "TransactWriteItems" => Operation::TransactWrite,
            "TransactGetItems" => Operation::TransactGet,
            _ => return None,
        })
    }
}

/// What a request's top-level object says about its cost.
#[derive(Default)]
struct Read<'de> {
    table: Cow<'de, str>,
    consistent: bool,
    item: u64,
    key: u64,
    values: u64,
    /// A batch's or a transaction's tables and costs, in the body's order.
    tables: Costs<'de>,
}

/// A batch's tables in name order, each by its last entry, as a tree's map holds them.
fn by_name(mut tables: Costs<'_>) -> Vec<TableCost> {
    // Stable: of a table named twice, the later entry stays last.
    tables.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<TableCost> = Vec::with_capacity(tables.len());
    for (table, units) in tables {
        match out.last_mut() {
            Some(last) if last.table == table => last.units = units,
            _ => out.push(TableCost {
                table: table.into_owned(),
                units,
            }),
        }
    }
    out
}

/// A transaction's costs summed per table, tables in the order they first appear.
fn by_first_seen(tables: Costs<'_>) -> Vec<TableCost> {
    let mut order: Vec<usize> = (0..tables.len()).collect();
    // Stable, so each table's costs are summed in the body's order.
    order.sort_by(|&a, &b| tables[a].0.cmp(&tables[b].0));
    let mut sums: Vec<(usize, f64)> = Vec::new();
    let mut previous: Option<&str> = None;
    for i in order {
        let (table, units) = &tables[i];
        match sums.last_mut() {
            Some((_, sum)) if previous == Some(table) => *sum += units,
            _ => sums.push((i, *units)),
        }
        previous = Some(table);
    }
    sums.sort_by_key(|&(first, _)| first);
    sums.into_iter()
        .map(|(first, units)| TableCost {
            table: tables[first].0.clone().into_owned(),
            units,
        })
        .collect()
}

/// The request's top-level object.
struct Request(Operation);

const FIELDS: &[&str] = &[
    "TableName",
    "ConsistentRead",
    "Item",
    "Key",
    "ExpressionAttributeValues",
    "RequestItems",
    "TransactItems",
];

impl<'de> Visitor<'de> for Request {
    type Value = Read<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a DynamoDB request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read<'de>, A::Error> {
        let mut read = Read::default();
        while let Some(field) = map.next_key_seed(Named(FIELDS))? {
            match (field, self.0) {
                (Some(0), _) => read.table = map.next_value_seed(Any(TableName))?,
                (Some(1), _) => read.consistent = map.next_value_seed(Any(IsTrue))?,
                (Some(2), _) => read.item = map.next_value_seed(Any(Attributes))?.unwrap_or(0),
                (Some(3), _) => read.key = map.next_value_seed(Any(Attributes))?.unwrap_or(0),
                (Some(4), _) => read.values = map.next_value_seed(Any(Attributes))?.unwrap_or(0),
                (Some(5), Operation::BatchWrite | Operation::BatchGet) => {
                    read.tables = map.next_value_seed(Any(RequestItems(self.0)))?;
                }
                (Some(6), Operation::TransactWrite) => {
                    read.tables = map.next_value_seed(Any(TransactItems(WRITE_UNIT)))?;
                }
                (Some(6), Operation::TransactGet) => {
                    read.tables = map.next_value_seed(Any(TransactItems(READ_UNIT)))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(read)
    }
}

/// A key, borrowed from the body unless it has escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_owned()))
    }
}

/// A `TableName`: its text if a string, else empty.
struct TableName;

impl<'de> Shape<'de> for TableName {
    type Value = Cow<'de, str>;

    fn other(self) -> Cow<'de, str> {
        Cow::Borrowed("")
    }

    fn text<E: de::Error>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_owned()))
    }

    fn borrowed<E: de::Error>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }
}

/// Whether a value is `true` (anything else is not).
struct IsTrue;

impl Shape<'_> for IsTrue {
    type Value = bool;

    fn other(self) -> bool {
        false
    }

    fn boolean(self, b: bool) -> bool {
        b
    }
}

/// A map of attribute names to values (an item, a key): the bytes of its names and
/// values; `None` when the value is not an object.
struct Attributes;

impl<'de> Shape<'de> for Attributes {
    type Value = Option<u64>;

    fn other(self) -> Option<u64> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut size = 0u64;
        while let Some(name) = map.next_key_seed(Key)? {
            let value = map.next_value_seed(Any(Attribute))?;
            size = size.saturating_add(name.len() as u64).saturating_add(value);
        }
        Ok(Some(size))
    }
}

/// One attribute value, `{"<type>": <value>}`, sized without its name. A tree's map
/// holds its keys in order, so with several types the first by name is the one sized.
struct Attribute;

impl<'de> Shape<'de> for Attribute {
    type Value = u64;

    fn other(self) -> u64 {
        0
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut first: Option<(Cow<'de, str>, u64)> = None;
        while let Some(kind) = map.next_key_seed(Key)? {
            let size = map.next_value_seed(Any(Typed(kind_of(&kind))))?;
            if first.as_ref().is_none_or(|(name, _)| kind < *name) {
                first = Some((kind, size));
            }
        }
        Ok(first.map_or(0, |(_, size)| size))
    }
}

/// An attribute value's type, as far as its size goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    S,
    N,
    B,
    /// `BOOL` and `NULL`: one byte, whatever the value.
    One,
    Ss,
    Ns,
    Bs,
    L,
    M,
    Unknown,
}

fn kind_of(name: &str) -> Kind {
    match name {
        "S" => Kind::S,
        "N" => Kind::N,
        "B" => Kind::B,
        "BOOL" | "NULL" => Kind::One,
        "SS" => Kind::Ss,
        "NS" => Kind::Ns,
        "BS" => Kind::Bs,
        "L" => Kind::L,
        "M" => Kind::M,
        _ => Kind::Unknown,
    }
}

fn str_len(s: &str) -> u64 {
    s.len() as u64
}

/// A value under a type key, sized by its type's rule; 0 when it is not of the kind
/// the type takes (`BOOL` and `NULL` are one byte whatever they hold).
struct Typed(Kind);

impl<'de> Shape<'de> for Typed {
    type Value = u64;

    fn other(self) -> u64 {
        u64::from(self.0 == Kind::One)
    }

    fn text<E: de::Error>(self, s: &str) -> Result<u64, E> {
        Ok(match self.0 {
            Kind::S => str_len(s),
            Kind::N => number_size(s),
            Kind::B => base64_len(s),
            _ => self.other(),
        })
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let rule: fn(&str) -> u64 = match self.0 {
            Kind::Ss => str_len,
            Kind::Ns => number_size,
            Kind::Bs => base64_len,
            Kind::L => {
                let mut sum = 3u64;
                while let Some(size) = seq.next_element_seed(Any(Attribute))? {
                    sum = sum.saturating_add(1 + size);
                }
                return Ok(sum);
            }
            _ => {
                IgnoredAny.visit_seq(seq)?;
                return Ok(self.other());
            }
        };
        let mut sum = 0u64;
        while let Some(size) = seq.next_element_seed(Any(Text(rule)))? {
            sum = sum.saturating_add(size);
        }
        Ok(sum)
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        if self.0 != Kind::M {
            IgnoredAny.visit_map(map)?;
            return Ok(self.other());
        }
        let mut sum = 3u64;
        while let Some(name) = map.next_key_seed(Key)? {
            let size = map.next_value_seed(Any(Attribute))?;
            sum = sum.saturating_add(1 + name.len() as u64 + size);
        }
        Ok(sum)
    }
}

/// A set's element: a string sized by a rule; anything else counts nothing.
struct Text(fn(&str) -> u64);

impl Shape<'_> for Text {
    type Value = u64;

    fn other(self) -> u64 {
        0
    }

    fn text<E: de::Error>(self, s: &str) -> Result<u64, E> {
        Ok((self.0)(s))
    }
}

/// A table and its cost, the table's name borrowed from the body where it can be.
type Costs<'de> = Vec<(Cow<'de, str>, f64)>;

/// A batch's `RequestItems`: each table and its cost, in the body's order.
struct RequestItems(Operation);

impl<'de> Shape<'de> for RequestItems {
    type Value = Costs<'de>;

    fn other(self) -> Costs<'de> {
        Vec::new()
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Costs<'de>, A::Error> {
        let mut tables = Vec::new();
        while let Some(table) = map.next_key_seed(Key)? {
            let units = if self.0 == Operation::BatchWrite {
                map.next_value_seed(Any(WriteRequests))?
            } else {
                map.next_value_seed(Any(GetTable))?
            };
            tables.push((table, units));
        }
        Ok(tables)
    }
}

/// A `BatchWriteItem` table's requests: a list, or one request given bare.
struct WriteRequests;

impl<'de> Shape<'de> for WriteRequests {
    type Value = f64;

    fn other(self) -> f64 {
        1.0
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<f64, A::Error> {
        let mut sum = 0.0;
        while let Some(units) = seq.next_element_seed(Any(WriteRequest))? {
            sum += units;
        }
        Ok(sum)
    }

    fn object<A: MapAccess<'de>>(self, map: A) -> Result<f64, A::Error> {
        WriteRequest.object(map)
    }
}

/// One `BatchWriteItem` request: a put by its item's size, anything else one unit.
struct WriteRequest;

impl<'de> Shape<'de> for WriteRequest {
    type Value = f64;

    fn other(self) -> f64 {
        1.0
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<f64, A::Error> {
        let mut item = None;
        while let Some(field) = map.next_key_seed(Named(&["PutRequest"]))? {
            if field.is_some() {
                item = map.next_value_seed(Any(PutRequest))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(item.map_or(1.0, |size| units(size, WRITE_UNIT)))
    }
}

/// A `PutRequest`: its `Item`'s size, when it has one that is an object.
struct PutRequest;

impl<'de> Shape<'de> for PutRequest {
    type Value = Option<u64>;

    fn other(self) -> Option<u64> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut item = None;
        while let Some(field) = map.next_key_seed(Named(&["Item"]))? {
            if field.is_some() {
                item = map.next_value_seed(Any(Attributes))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(item)
    }
}

/// A `BatchGetItem` table: a unit per key, half when eventually consistent. A list
/// in its place counts by its first element.
struct GetTable;

impl<'de> Shape<'de> for GetTable {
    type Value = f64;

    fn other(self) -> f64 {
        0.0
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<f64, A::Error> {
        let (mut keys, mut consistent) = (0u64, false);
        while let Some(field) = map.next_key_seed(Named(&["Keys", "ConsistentRead"]))? {
            match field {
                Some(0) => keys = map.next_value_seed(Any(Count))?,
                Some(1) => consistent = map.next_value_seed(Any(IsTrue))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        #[allow(clippy::cast_precision_loss, reason = "a count of keys")]
        let keys = keys as f64;
        Ok(keys * if consistent { 1.0 } else { 0.5 })
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<f64, A::Error> {
        let first = seq.next_element_seed(Any(FirstTable))?.unwrap_or(0.0);
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(first)
    }
}

/// The first element of a list given for a `BatchGetItem` table: counted if an object.
struct FirstTable;

impl<'de> Shape<'de> for FirstTable {
    type Value = f64;

    fn other(self) -> f64 {
        0.0
    }

    fn object<A: MapAccess<'de>>(self, map: A) -> Result<f64, A::Error> {
        GetTable.object(map)
    }
}

/// How many elements a list has; 0 for anything else.
struct Count;

impl<'de> Shape<'de> for Count {
    type Value = u64;

    fn other(self) -> u64 {
        0
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut n = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

/// A transaction's `TransactItems`: twice each action's units at `self.0` bytes a
/// unit, with its table, in the body's order.
struct TransactItems(u64);

impl<'de> Shape<'de> for TransactItems {
    type Value = Costs<'de>;

    fn other(self) -> Costs<'de> {
        Vec::new()
    }

    fn list<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Costs<'de>, A::Error> {
        let mut tables = Vec::new();
        while let Some(action) = seq.next_element_seed(Any(Action))? {
            if let Some((table, size)) = action {
                tables.push((table, 2.0 * units(size, self.0)));
            }
        }
        Ok(tables)
    }
}

/// An action's table and the size it is charged for.
type Charged<'de> = Option<(Cow<'de, str>, u64)>;

/// One action (`{"Put": {...}}`): its table and size; `None` when its first entry by
/// name is not an object.
struct Action;

impl<'de> Shape<'de> for Action {
    type Value = Charged<'de>;

    fn other(self) -> Charged<'de> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Charged<'de>, A::Error> {
        let mut first: Option<(Cow<'de, str>, Charged<'de>)> = None;
        while let Some(name) = map.next_key_seed(Key)? {
            let inner = map.next_value_seed(Any(Inner))?;
            if first.as_ref().is_none_or(|(least, _)| name < *least) {
                first = Some((name, inner));
            }
        }
        Ok(first.and_then(|(_, inner)| inner))
    }
}

/// An action's object: its table, and its `Item`'s size if it has one that is an
/// object, else its `Key`'s and `ExpressionAttributeValues`' together.
struct Inner;

impl<'de> Shape<'de> for Inner {
    type Value = Charged<'de>;

    fn other(self) -> Charged<'de> {
        None
    }

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Charged<'de>, A::Error> {
        let mut table = Cow::Borrowed("");
        let (mut item, mut key, mut values) = (None, 0, 0);
        let names = &["TableName", "Item", "Key", "ExpressionAttributeValues"];
        while let Some(field) = map.next_key_seed(Named(names))? {
            match field {
                Some(0) => table = map.next_value_seed(Any(TableName))?,
                Some(1) => item = map.next_value_seed(Any(Attributes))?,
                Some(2) => key = map.next_value_seed(Any(Attributes))?.unwrap_or(0),
                Some(3) => values = map.next_value_seed(Any(Attributes))?.unwrap_or(0),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let size = item.unwrap_or_else(|| key.saturating_add(values));
        Ok(Some((table, size)))
    }
}
