//! DynamoDB's capacity units, by the developer guide's rules ("DynamoDB item sizes and
//! formats", "Read/write capacity mode"): an item's size is the sum of its attribute
//! names and values; a write costs one unit per KiB of item, rounded up per item; a
//! strongly consistent read one per 4 KiB, an eventually consistent one half that;
//! a transaction twice. Estimated from a request body, settled from an answer's
//! `ConsumedCapacity`.

mod general;
mod single;

use serde_json::{Map, Value};

/// One table's share of a request's cost, in capacity units.
#[derive(Clone, Debug, PartialEq)]
pub struct TableCost {
    /// The table, as the request names it.
    pub table: String,
    /// Read or write capacity units.
    pub units: f64,
}

const WRITE_UNIT: u64 = 1024;
const READ_UNIT: u64 = 4096;

/// A number's size: one byte per two significant digits, plus one. Leading and
/// trailing zeros, sign, point and exponent do not count.
fn number_size(text: &str) -> u64 {
    let mantissa = text.split(['e', 'E']).next().unwrap_or("");
    let digits = mantissa.bytes().filter(u8::is_ascii_digit);
    // The digits from the first non-zero one to the last.
    let (mut first, mut last) = (None, 0);
    for (i, digit) in digits.enumerate() {
        if digit != b'0' {
            first.get_or_insert(i);
            last = i;
        }
    }
    let significant = first.map_or(0, |first| last - first + 1) as u64;
    significant.div_ceil(2) + 1
}

/// The raw length of a base64 value, without decoding it.
fn base64_len(text: &str) -> u64 {
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count() as u64;
    (text.len() as u64 / 4 * 3).saturating_sub(padding)
}

/// Units for `size` bytes at `unit` bytes a unit, rounded up, at least one.
fn units(size: u64, unit: u64) -> f64 {
    size.div_ceil(unit).max(1) as f64
}

/// What a request costs `table` (every table it touches, if `None`), in capacity
/// units, as [`estimate`] reckons it; single-item operations take a faster reader
/// first.
pub fn estimate_units(operation: &str, body: &[u8], table: Option<&str>) -> Option<f64> {
    if let Some(units) = single::units(operation, body) {
        return Some(units);
    }
    let costs = estimate(operation, body)?;
    match table {
        Some(table) => costs.iter().find(|c| c.table == table).map(|c| c.units),
        None => Some(costs.iter().map(|c| c.units).sum()),
    }
}

/// What a request costs each table it touches, as far as its body tells before it is
/// sent. Reads whose items are not in the request (Query, Scan) cost one item; an
/// UpdateItem its key and new values; a DeleteItem one unit. `None` for an operation
/// that uses no table capacity or a body that is not JSON. Read without building a
/// JSON tree, whatever the request (`general`).
pub fn estimate(operation: &str, body: &[u8]) -> Option<Vec<TableCost>> {
    general::estimate(operation, body)
}

/// [`consumed`] of a `ConsumedCapacity` value (one object or a list) at the start of
/// `value`, what follows it left alone.
pub fn consumed_value(value: &[u8]) -> Vec<TableCost> {
    let mut de = serde_json::Deserializer::from_slice(value);
    let Ok(value) = <Value as serde::Deserialize>::deserialize(&mut de) else {
        return Vec::new();
    };
    let mut answer = Map::new();
    answer.insert("ConsumedCapacity".to_owned(), value);
    serde_json::to_vec(&answer).map_or_else(|_| Vec::new(), |body| consumed(&body))
}

/// What an answer says was consumed, per table: its `ConsumedCapacity` (an object, or a
/// list for batches and transactions), present when the client asked for it. Empty when
/// absent.
pub fn consumed(body: &[u8]) -> Vec<TableCost> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "ConsumedCapacity")]
        consumed: Option<OneOrMany>,
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Consumed),
        Many(Vec<Consumed>),
    }
    #[derive(serde::Deserialize)]
    struct Consumed {
        #[serde(rename = "TableName")]
        table: Option<String>,
        #[serde(rename = "CapacityUnits")]
        units: Option<f64>,
    }
    let Ok(Answer { consumed: Some(c) }) = serde_json::from_slice::<Answer>(body) else {
        return Vec::new();
    };
    let list = match c {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    };
    list.into_iter()
        .filter_map(|c| {
            Some(TableCost {
                table: c.table?,
                units: c.units.filter(|u| u.is_finite() && *u >= 0.0)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
