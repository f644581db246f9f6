//! The costing that built a JSON tree of the whole body, as it was before the
//! reader without a tree replaced it (issue 49): kept as the oracle the property test
//! compares that reader with.

use serde_json::{Map, Value};

use super::super::{READ_UNIT, TableCost, WRITE_UNIT, base64_len, number_size, units};

/// The size in bytes DynamoDB charges for an item in the attribute-value format
/// (`{"name": {"S": "..."}, ...}`).
pub(super) fn item_size(item: &Map<String, Value>) -> u64 {
    item.iter()
        .map(|(name, value)| name.len() as u64 + value_size(value))
        .sum()
}

/// The size of one attribute value, without its name.
fn value_size(value: &Value) -> u64 {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    match (kind.as_str(), inner) {
        ("S", Value::String(s)) => s.len() as u64,
        ("N", Value::String(n)) => number_size(n),
        ("B", Value::String(b)) => base64_len(b),
        ("BOOL" | "NULL", _) => 1,
        ("SS", Value::Array(v)) => v
            .iter()
            .filter_map(Value::as_str)
            .map(|s| s.len() as u64)
            .sum(),
        ("NS", Value::Array(v)) => v.iter().filter_map(Value::as_str).map(number_size).sum(),
        ("BS", Value::Array(v)) => v.iter().filter_map(Value::as_str).map(base64_len).sum(),
        ("L", Value::Array(v)) => 3 + v.iter().map(|e| 1 + value_size(e)).sum::<u64>(),
        ("M", Value::Object(m)) => {
            3 + m
                .iter()
                .map(|(name, e)| 1 + name.len() as u64 + value_size(e))
                .sum::<u64>()
        }
        _ => 0,
    }
}

/// What a request costs each table it touches, as far as its body tells before it is
/// sent. Reads whose items are not in the request (Query, Scan) cost one item; an
/// UpdateItem its key and new values; a DeleteItem one unit. `None` for an operation
/// that uses no table capacity or a body that is not JSON.
pub(super) fn estimate(operation: &str, body: &[u8]) -> Option<Vec<TableCost>> {
    let body: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let table = || {
        body.get("TableName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let one = |units| {
        Some(vec![TableCost {
            table: table(),
            units,
        }])
    };
    let consistent = body.get("ConsistentRead").and_then(Value::as_bool) == Some(true);
    let read = if consistent { 1.0 } else { 0.5 };
    match operation {
        "PutItem" => one(units(item_size(object(&body, "Item")), WRITE_UNIT)),
        "UpdateItem" => {
            let values = object(&body, "ExpressionAttributeValues");
            let size = item_size(object(&body, "Key")) + item_size(values);
            one(units(size, WRITE_UNIT))
        }
        "DeleteItem" => one(1.0),
        "GetItem" | "Query" | "Scan" => one(read),
        "BatchWriteItem" => Some(per_table(&body, |requests| {
            requests.iter().map(write_request_units).sum()
        })),
        "BatchGetItem" => Some(per_table(&body, |tables| {
            let keys = tables.first().map_or(0, |t| {
                t.get("Keys").and_then(Value::as_array).map_or(0, Vec::len)
            });
            let consistent =
                tables.first().and_then(|t| t.get("ConsistentRead")) == Some(&Value::Bool(true));
            keys as f64 * if consistent { 1.0 } else { 0.5 }
        })),
        "TransactWriteItems" => Some(transact(&body, WRITE_UNIT)),
        "TransactGetItems" => Some(transact(&body, READ_UNIT)),
        _ => None,
    }
}

/// The object at `key`, or an empty one.
fn object<'a>(body: &'a Map<String, Value>, key: &str) -> &'a Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    body.get(key).and_then(Value::as_object).unwrap_or(&EMPTY)
}

/// A batch's `RequestItems`, costed table by table. `BatchGetItem` has one object
/// per table, `BatchWriteItem` a list; both are handed over as a slice.
fn per_table(body: &Map<String, Value>, cost: impl Fn(&[Value]) -> f64) -> Vec<TableCost> {
    object(body, "RequestItems")
        .iter()
        .map(|(table, requests)| TableCost {
            table: table.clone(),
            units: match requests {
                Value::Array(list) => cost(list),
                other => cost(std::slice::from_ref(other)),
            },
        })
        .collect()
}

/// One `BatchWriteItem` request: a put by its item's size, a delete one unit.
fn write_request_units(request: &Value) -> f64 {
    match request
        .get("PutRequest")
        .and_then(|p| p.get("Item"))
        .and_then(Value::as_object)
    {
        Some(item) => units(item_size(item), WRITE_UNIT),
        None => 1.0,
    }
}

/// A transaction: twice each item's units, per table. Items whose size is not in the
/// request (a Get, a Delete, a ConditionCheck) count one unit's size.
fn transact(body: &Map<String, Value>, unit: u64) -> Vec<TableCost> {
    let mut out: Vec<TableCost> = Vec::new();
    let items = body.get("TransactItems").and_then(Value::as_array);
    for action in items.into_iter().flatten().filter_map(Value::as_object) {
        let Some(inner) = action.values().next().and_then(Value::as_object) else {
            continue;
        };
        let table = inner.get("TableName").and_then(Value::as_str).unwrap_or("");
        let size = match inner.get("Item").and_then(Value::as_object) {
            Some(item) => item_size(item),
            None => {
                item_size(object(inner, "Key"))
                    + item_size(object(inner, "ExpressionAttributeValues"))
            }
        };
        let cost = 2.0 * units(size, unit);
        match out.iter_mut().find(|t| t.table == table) {
            Some(t) => t.units += cost,
            None => out.push(TableCost {
                table: table.to_owned(),
                units: cost,
            }),
        }
    }
    out
}
