//! What a DynamoDB request costs the mock in capacity units, priced by DynamoDB's own
//! documented rules and by nothing of easeoff's (so what easeoff estimates and what the
//! mock charges can disagree, as with the real service).
//!
//! Item sizes: <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>
//! ("DynamoDB item sizes and formats"). An item is the sum over its attributes of the
//! UTF-8 length of the name plus the size of the value:
//! - String: its UTF-8 bytes.
//! - Number: "approximately 1 byte per two significant digits + 1 byte", leading and
//!   trailing zeroes trimmed. The mock takes it as `ceil(significant digits / 2) + 1`,
//!   i.e. `(digits + 1) / 2 + 1` in integers; the exponent of `1.5E3` is ignored.
//! - Binary: its raw bytes, which the JSON wire carries as base64: `3 * len / 4` less
//!   the `=` padding.
//! - Null and Boolean: 1 byte.
//! - List and Map: 3 bytes, plus each element's size and 1 byte per element (a map
//!   element's name counts as an attribute name does).
//! - Sets (SS, NS, BS): the sum of their elements' sizes.
//!
//! Capacity: <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/provisioned-capacity-mode.html>
//! and <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>.
//! A write takes one write unit per KB (1,024 bytes), rounded up, at least one; a
//! transactional write two per KB; a strongly consistent read one read unit per 4 KB,
//! an eventually consistent one half of that, a transactional one two. The mock stores
//! nothing, so:
//! - PutItem: the item in the request.
//! - UpdateItem, DeleteItem: the stored item is unknown; the request's `Key` plus the
//!   values of its `ExpressionAttributeValues` (and legacy `AttributeUpdates`).
//! - BatchWriteItem: the sum over its puts and deletes, each rounded up on its own.
//! - TransactWriteItems: the sum over its actions, each priced as above and doubled.
//! - GetItem: the stored item's size is unknown, so it is taken as at most 4 KB: one
//!   read unit with `"ConsistentRead": true`, half a unit otherwise (eventually
//!   consistent is DynamoDB's default).
//! - BatchGetItem: each key a GetItem as above (DynamoDB prices each item of a batch on
//!   its own), with its table's `ConsistentRead`; TransactGetItems: two per item.
//! - Everything else (Query, Scan, control plane), and a body that is not JSON: one.

use serde_json::{Map, Value};

/// One KB, as DynamoDB counts it.
const KB: u64 = 1024;

/// The capacity units `operation` (the `X-Amz-Target` operation, e.g. `PutItem`) with
/// this JSON `body` costs.
pub fn units(operation: &str, body: &[u8]) -> f64 {
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return 1.0;
    };
    let priced = match operation {
        "PutItem" => Some(write_units(item_size(body.get("Item")))),
        "UpdateItem" | "DeleteItem" => Some(write_units(keyed_size(&body))),
        "BatchWriteItem" => sum(batch_writes(&body).map(write_units)),
        "TransactWriteItems" => sum(each(&body, "TransactItems")
            .filter_map(transact_write_size)
            .map(|size| 2 * write_units(size))),
        "GetItem" => return read_unit(&body),
        "BatchGetItem" => {
            let tables = body.get("RequestItems").and_then(Value::as_object);
            let reads: Vec<f64> = tables
                .into_iter()
                .flat_map(Map::values)
                .flat_map(|table| each(table, "Keys").map(move |_| read_unit(table)))
                .collect();
            return if reads.is_empty() {
                1.0
            } else {
                reads.iter().sum()
            };
        }
        "TransactGetItems" => sum(each(&body, "TransactItems").map(|_| 2)),
        _ => None,
    };
    priced.map_or(1.0, |units| units as f64)
}

/// The size in bytes of an item (a map of attribute names to DynamoDB JSON attribute
/// values, e.g. `{"pk": {"S": "a"}}`); 0 for anything else.
pub fn item_size(item: Option<&Value>) -> u64 {
    item.and_then(Value::as_object)
        .map_or(0, |attributes| attributes.iter().map(attribute_size).sum())
}

/// A named attribute: its name's UTF-8 bytes and its value.
fn attribute_size((name, value): (&String, &Value)) -> u64 {
    name.len() as u64 + value_size(value)
}

/// The size of one attribute value in DynamoDB JSON, e.g. `{"N": "123.45"}`; 0 for what
/// is not one.
pub fn value_size(value: &Value) -> u64 {
    let Some((kind, inner)) = value.as_object().and_then(|v| v.iter().next()) else {
        return 0;
    };
    let strings = || {
        inner
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, |s| s.len() as u64),
        "N" => inner.as_str().map_or(0, number_size),
        "B" => inner.as_str().map_or(0, binary_size),
        "BOOL" | "NULL" => 1,
        "SS" => strings().map(|s| s.len() as u64).sum(),
        "NS" => strings().map(number_size).sum(),
        "BS" => strings().map(binary_size).sum(),
        "L" => {
            let elements = inner.as_array().into_iter().flatten();
            3 + elements.map(|e| value_size(e) + 1).sum::<u64>()
        }
        "M" => {
            let elements = inner.as_object().into_iter().flatten();
            3 + elements.map(|e| attribute_size(e) + 1).sum::<u64>()
        }
        _ => 0,
    }
}

/// A number's size: one byte per two significant digits, rounded up, and one more.
pub fn number_size(text: &str) -> u64 {
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let significant = match (
        digits.iter().position(|&d| d != b'0'),
        digits.iter().rposition(|&d| d != b'0'),
    ) {
        (Some(first), Some(last)) => last - first + 1,
        _ => 0,
    };
    (significant as u64).div_ceil(2) + 1
}

/// The raw length of base64 `text`: three bytes per four characters, less the padding.
pub fn binary_size(text: &str) -> u64 {
    let text = text.trim();
    let padding = text.bytes().rev().take_while(|&b| b == b'=').count().min(2);
    (text.len() as u64 * 3 / 4).saturating_sub(padding as u64)
}

/// Write units for an item of `size` bytes: one per KB, rounded up, at least one.
pub fn write_units(size: u64) -> u64 {
    size.div_ceil(KB).max(1)
}

/// A read of an item of unknown size (taken as at most 4 KB): one unit if `request`
/// asks for a strongly consistent read, else half.
fn read_unit(request: &Value) -> f64 {
    if request.get("ConsistentRead").and_then(Value::as_bool) == Some(true) {
        1.0
    } else {
        0.5
    }
}

/// What an update, delete or condition check brings of the item: its `Key`, the values
/// of `ExpressionAttributeValues` and legacy `AttributeUpdates` (name and value).
fn keyed_size(request: &Value) -> u64 {
    let values = request
        .get("ExpressionAttributeValues")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(Map::values)
        .map(value_size);
    let updates = request
        .get("AttributeUpdates")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, update)| name.len() as u64 + update.get("Value").map_or(0, value_size));
    item_size(request.get("Key")) + values.sum::<u64>() + updates.sum::<u64>()
}

/// The sizes of a BatchWriteItem's puts (the item) and deletes (the key).
fn batch_writes(body: &Value) -> impl Iterator<Item = u64> + '_ {
    body.get("RequestItems")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(Map::values)
        .flat_map(Value::as_array)
        .flatten()
        .filter_map(|write| {
            if let Some(put) = write.get("PutRequest") {
                Some(item_size(put.get("Item")))
            } else {
                write.get("DeleteRequest").map(|d| item_size(d.get("Key")))
            }
        })
}

/// The size of one of a TransactWriteItems' actions.
fn transact_write_size(action: &Value) -> Option<u64> {
    if let Some(put) = action.get("Put") {
        return Some(item_size(put.get("Item")));
    }
    ["Update", "Delete", "ConditionCheck"]
        .iter()
        .find_map(|kind| action.get(kind))
        .map(keyed_size)
}

/// The elements of the array `field` of `value`.
fn each<'a>(value: &'a Value, field: &'static str) -> impl Iterator<Item = &'a Value> + 'a {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The total of `units`; `None` when there are none (a malformed or empty batch, which
/// is then charged one).
fn sum(units: impl Iterator<Item = u64>) -> Option<u64> {
    units.fold(None, |total, u| Some(total.unwrap_or(0) + u))
}

#[cfg(test)]
mod tests;
