mod tree;

use serde_json::{Value, json};

use super::*;

fn size(item: Value) -> u64 {
    general::item_size(item.to_string().as_bytes()).unwrap()
}

fn cost(operation: &str, body: Value) -> Vec<(String, f64)> {
    estimate(operation, body.to_string().as_bytes())
        .unwrap()
        .into_iter()
        .map(|t| (t.table, t.units))
        .collect()
}

fn one(table: &str, units: f64) -> Vec<(String, f64)> {
    vec![(table.to_owned(), units)]
}

/// A string attribute of `n` bytes, named `s`: `n + 1` bytes.
fn padded(n: usize) -> Value {
    json!({"pk": {"S": "k"}, "s": {"S": "x".repeat(n)}})
}

#[test]
fn each_type_is_sized_by_the_developer_guides_rules() {
    // Strings: name + UTF-8 bytes ("é" is two).
    assert_eq!(size(json!({"name": {"S": "héllo"}})), 4 + 6);
    // Numbers: name + one byte per two significant digits + 1; zeros trimmed.
    assert_eq!(size(json!({"n": {"N": "123.45"}})), 1 + 3 + 1);
    assert_eq!(size(json!({"n": {"N": "-0.00012300"}})), 1 + 2 + 1);
    assert_eq!(size(json!({"n": {"N": "1E+10"}})), 1 + 1 + 1);
    assert_eq!(size(json!({"n": {"N": "0"}})), 1 + 1);
    // Binary: the raw length of the base64 text.
    assert_eq!(size(json!({"b": {"B": "aGVsbG8="}})), 1 + 5);
    assert_eq!(size(json!({"b": {"B": "aGVsbG8h"}})), 1 + 6);
    // Null and Boolean: one byte.
    assert_eq!(
        size(json!({"t": {"BOOL": true}, "z": {"NULL": true}})),
        2 + 2
    );
    // Sets: the sum of their elements.
    assert_eq!(size(json!({"ss": {"SS": ["ab", "cde"]}})), 2 + 5);
    assert_eq!(size(json!({"ns": {"NS": ["1", "12345"]}})), 2 + 2 + 4);
    // List and Map: 3 bytes, plus one per element; a map's keys count as names.
    assert_eq!(size(json!({"l": {"L": []}})), 1 + 3);
    assert_eq!(
        size(json!({"l": {"L": [{"S": "ab"}, {"N": "7"}]}})),
        1 + 3 + (1 + 2) + (1 + 2)
    );
    assert_eq!(
        size(json!({"m": {"M": {"k": {"S": "v"}}}})),
        1 + 3 + 1 + 1 + 1
    );
}

#[test]
fn a_write_costs_one_unit_per_kib_rounded_up_per_item() {
    // pk (2 + 1) and s (1 + n): an item of exactly 1024 bytes is one unit, 1025 two.
    assert_eq!(size(padded(1020)), 1024);
    assert_eq!(
        cost("PutItem", json!({"TableName": "t", "Item": padded(1020)})),
        one("t", 1.0)
    );
    assert_eq!(
        cost("PutItem", json!({"TableName": "t", "Item": padded(1021)})),
        one("t", 2.0)
    );
    // The guide's 500-byte item is one unit; 3.5 KiB is four.
    assert_eq!(
        cost("PutItem", json!({"TableName": "t", "Item": padded(500)})),
        one("t", 1.0)
    );
    assert_eq!(
        cost("PutItem", json!({"TableName": "t", "Item": padded(3580)})),
        one("t", 4.0)
    );
    // A batch rounds each item up on its own: 0.5 KiB + 1.5 KiB is 1 + 2, not 2.
    let batch = json!({"RequestItems": {
        "a": [{"PutRequest": {"Item": padded(500)}}, {"PutRequest": {"Item": padded(1500)}}],
        "b": [{"DeleteRequest": {"Key": {"pk": {"S": "k"}}}}],
    }});
    assert_eq!(
        cost("BatchWriteItem", batch),
        vec![("a".into(), 3.0), ("b".into(), 1.0)]
    );
}

#[test]
fn reads_cost_a_unit_per_item_half_when_eventually_consistent() {
    let get = json!({"TableName": "t", "Key": {"pk": {"S": "k"}}});
    assert_eq!(cost("GetItem", get.clone()), one("t", 0.5));
    let mut strong = get;
    strong["ConsistentRead"] = json!(true);
    assert_eq!(cost("GetItem", strong), one("t", 1.0));
    let batch = json!({"RequestItems": {
        "a": {"Keys": [{"pk": {"S": "1"}}, {"pk": {"S": "2"}}], "ConsistentRead": true},
        "b": {"Keys": [{"pk": {"S": "1"}}]},
    }});
    assert_eq!(
        cost("BatchGetItem", batch),
        vec![("a".into(), 2.0), ("b".into(), 0.5)]
    );
}

#[test]
fn a_transaction_costs_twice() {
    let body = json!({"TransactItems": [
        {"Put": {"TableName": "a", "Item": padded(1500)}},
        {"ConditionCheck": {"TableName": "a", "Key": {"pk": {"S": "k"}}}},
        {"Delete": {"TableName": "b", "Key": {"pk": {"S": "k"}}}},
    ]});
    assert_eq!(
        cost("TransactWriteItems", body),
        vec![("a".into(), 6.0), ("b".into(), 2.0)]
    );
}

#[test]
fn an_update_is_costed_on_its_key_and_new_values() {
    let body = json!({"TableName": "t", "Key": {"pk": {"S": "k"}},
        "ExpressionAttributeValues": {":v": {"S": "x".repeat(2000)}}});
    assert_eq!(cost("UpdateItem", body), one("t", 2.0));
}

#[test]
fn what_is_not_a_table_operation_or_not_json_is_not_costed() {
    assert!(estimate("DescribeTable", b"{}").is_none());
    assert!(estimate("PutItem", b"not json").is_none());
    assert_eq!(cost("PutItem", json!({"TableName": "t"})), one("t", 1.0));
}

#[test]
fn consumed_capacity_is_read_as_one_object_or_a_list() {
    let one_table =
        br#"{"ConsumedCapacity":{"TableName":"t","CapacityUnits":3.0,"WriteCapacityUnits":3.0}}"#;
    assert_eq!(
        consumed(one_table),
        vec![TableCost {
            table: "t".into(),
            units: 3.0
        }]
    );
    let batch = br#"{"UnprocessedItems":{},"ConsumedCapacity":[{"TableName":"a","CapacityUnits":2.5},{"TableName":"b","CapacityUnits":1}]}"#;
    assert_eq!(
        consumed(batch),
        vec![
            TableCost {
                table: "a".into(),
                units: 2.5
            },
            TableCost {
                table: "b".into(),
                units: 1.0
            }
        ]
    );
    assert!(consumed(br#"{"Item":{}}"#).is_empty());
    assert!(consumed(br#"{"ConsumedCapacity":{"TableName":"t","CapacityUnits":-1}}"#).is_empty());
    assert!(consumed(b"<html>").is_empty());
}

#[test]
fn single_item_requests_read_without_a_tree_cost_what_the_tree_says() {
    let item = json!({
        "pk": {"S": "customer#1234"}, "e": {"S": "h\u{e9}llo \"q\""},
        "n": {"N": "-0.00012300"}, "b": {"B": "aGVsbG8="}, "t": {"BOOL": true},
        "z": {"NULL": true}, "ss": {"SS": ["ab", "cde"]}, "ns": {"NS": ["1", "12345"]},
        "bs": {"BS": ["aGk="]}, "l": {"L": [{"S": "ab"}, {"M": {"k": {"N": "7"}}}]},
        "m": {"M": {"k": {"S": "v"}, "deep": {"L": []}}},
        "s": {"S": "x".repeat(1500)},
    });
    let cases = [
        ("PutItem", json!({"TableName": "t", "Item": item.clone()})),
        (
            "PutItem",
            json!({"Item": padded(1020), "TableName": "t", "Other": [1, {"a": null}]}),
        ),
        ("PutItem", json!({"TableName": "t", "Item": padded(1021)})),
        (
            "UpdateItem",
            json!({"TableName": "t", "Key": {"pk": {"S": "k"}},
            "ExpressionAttributeValues": {":v": {"S": "x".repeat(2000)}}}),
        ),
        (
            "DeleteItem",
            json!({"TableName": "t", "Key": {"pk": {"S": "k"}}}),
        ),
        ("GetItem", json!({"TableName": "t", "Key": item.clone()})),
        ("GetItem", json!({"TableName": "t", "ConsistentRead": true})),
        ("Query", json!({"TableName": "t", "ConsistentRead": "yes"})),
        ("Scan", json!({"TableName": "t", "ConsistentRead": false})),
    ];
    for (operation, body) in cases {
        let text = body.to_string();
        let tree: f64 = estimate(operation, text.as_bytes())
            .unwrap()
            .iter()
            .map(|t| t.units)
            .sum();
        assert_eq!(
            single::units(operation, text.as_bytes()),
            Some(tree),
            "{operation} {text}"
        );
    }
    // 1,500 bytes of `s` and the rest: two units, by both readers.
    let put = json!({"TableName": "t", "Item": item}).to_string();
    assert_eq!(single::units("PutItem", put.as_bytes()), Some(2.0));
}

#[test]
fn what_the_reader_without_a_tree_does_not_take_goes_to_the_general_path() {
    // A value of the wrong type, trailing text, another operation, not JSON.
    let odd = json!({"TableName": "t", "Item": {"a": {"S": 5}, "s": {"S": "x".repeat(2000)}}});
    let odd = odd.to_string();
    assert_eq!(single::units("PutItem", odd.as_bytes()), None);
    assert_eq!(
        estimate_units("PutItem", odd.as_bytes(), Some("t")),
        Some(2.0)
    );
    assert_eq!(single::units("PutItem", br#"{"Item": {}} x"#), None);
    assert_eq!(single::units("BatchWriteItem", b"{}"), None);
    assert_eq!(single::units("PutItem", b"not json"), None);
    assert_eq!(estimate_units("PutItem", b"not json", None), None);
}

/// A random JSON value for the property test below: attribute values of every type,
/// of the wrong types, with several types, and whatever else a client might send.
struct Bodies(fastrand::Rng);

const TYPES: [&str; 12] = [
    "S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M", "A", "Z",
];
const TABLES: [&str; 5] = ["orders", "lines", "t\"q", "\u{e9}t\u{e9}", ""];

impl Bodies {
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.0.usize(..from.len())]
    }

    fn text(&mut self) -> String {
        let most = if self.0.u8(..10) == 0 { 1500 } else { 12 };
        let n = self.0.usize(..most);
        (0..n)
            .map(|_| match self.0.u8(..20) {
                0 => '"',
                1 => '\\',
                2 => '\u{e9}',
                3 => '\n',
                4 => '0',
                _ => self.0.alphanumeric(),
            })
            .collect()
    }

    fn number(&mut self) -> String {
        let sign = if self.0.bool() { "-" } else { "" };
        let zeros = "0".repeat(self.0.usize(..3));
        let digits: String = (0..self.0.usize(..20)).map(|_| self.0.digit(10)).collect();
        let exponent = if self.0.bool() { "E+7" } else { "" };
        format!("{sign}{zeros}{digits}.{zeros}{exponent}")
    }

    fn scalar(&mut self) -> Value {
        match self.0.u8(..6) {
            0 => Value::Null,
            1 => json!(self.0.bool()),
            2 => json!(self.0.i64(..)),
            3 => json!(self.0.f64()),
            4 => json!(self.number()),
            _ => json!(self.text()),
        }
    }

    fn strings(&mut self, depth: u32) -> Value {
        let n = self.0.usize(..5);
        let list: Vec<Value> = (0..n)
            .map(|_| match self.0.u8(..8) {
                0 => self.any(depth),
                1 => json!(self.number()),
                _ => json!(self.text()),
            })
            .collect();
        Value::Array(list)
    }

    /// An attribute value: `{"TYPE": value}`, now and then odd.
    fn attribute(&mut self, depth: u32) -> Value {
        if self.0.u8(..12) == 0 {
            return self.any(depth);
        }
        let mut value = serde_json::Map::new();
        for _ in 0..if self.0.u8(..8) == 0 { 3 } else { 1 } {
            let kind = self.pick(&TYPES);
            let inner = if self.0.u8(..10) == 0 {
                self.any(depth)
            } else {
                match kind {
                    "S" | "B" => json!(self.text()),
                    "N" => json!(self.number()),
                    "BOOL" | "NULL" => json!(self.0.bool()),
                    "SS" | "NS" | "BS" => self.strings(depth),
                    "L" if depth > 0 => {
                        let n = self.0.usize(..4);
                        Value::Array((0..n).map(|_| self.attribute(depth - 1)).collect())
                    }
                    "M" if depth > 0 => self.item(depth - 1),
                    _ => self.scalar(),
                }
            };
            value.insert(kind.to_owned(), inner);
        }
        Value::Object(value)
    }

    fn item(&mut self, depth: u32) -> Value {
        let n = self.0.usize(..6);
        let item = (0..n)
            .map(|_| (self.text(), self.attribute(depth)))
            .collect();
        Value::Object(item)
    }

    /// An item, now and then something that is not one.
    fn maybe_item(&mut self) -> Value {
        if self.0.u8(..10) == 0 {
            self.any(1)
        } else {
            self.item(3)
        }
    }

    fn any(&mut self, depth: u32) -> Value {
        match self.0.u8(..4) {
            0 if depth > 0 => {
                let n = self.0.usize(..4);
                Value::Array((0..n).map(|_| self.any(depth - 1)).collect())
            }
            1 if depth > 0 => {
                let n = self.0.usize(..4);
                let map = (0..n)
                    .map(|_| (self.pick(&TYPES).to_owned(), self.any(depth - 1)))
                    .collect();
                Value::Object(map)
            }
            _ => self.scalar(),
        }
    }

    fn write_request(&mut self) -> Value {
        match self.0.u8(..8) {
            0 => self.any(2),
            1 => json!({"PutRequest": self.any(2)}),
            2 => {
                json!({"DeleteRequest": {"Key": self.item(1)}, "PutRequest": {"Item": self.maybe_item()}})
            }
            3 | 4 => json!({"DeleteRequest": {"Key": self.item(1)}}),
            _ => json!({"PutRequest": {"Item": self.maybe_item(), "x": 1}}),
        }
    }

    fn get_table(&mut self) -> Value {
        let keys: Vec<Value> = (0..self.0.usize(..5)).map(|_| self.item(1)).collect();
        let mut table = json!({"Keys": keys, "ProjectionExpression": "a"});
        match self.0.u8(..5) {
            0 => table["ConsistentRead"] = json!(true),
            1 => table["ConsistentRead"] = self.scalar(),
            2 => table["Keys"] = self.any(1),
            _ => {}
        }
        table
    }

    fn request_items(&mut self, write: bool) -> Value {
        if self.0.u8(..12) == 0 {
            return self.any(2);
        }
        let mut tables = serde_json::Map::new();
        for _ in 0..self.0.usize(..5) {
            let value = match (write, self.0.u8(..8)) {
                (_, 0) => self.any(2),
                (true, 1) => self.write_request(),
                (true, _) => {
                    let n = self.0.usize(..6);
                    Value::Array((0..n).map(|_| self.write_request()).collect())
                }
                (false, 1) => json!([self.get_table(), self.get_table()]),
                (false, _) => self.get_table(),
            };
            tables.insert(format!("{}{}", self.pick(&TABLES), self.0.u8(..3)), value);
        }
        Value::Object(tables)
    }

    fn action(&mut self) -> Value {
        if self.0.u8(..12) == 0 {
            return self.any(2);
        }
        let mut action = serde_json::Map::new();
        for _ in 0..if self.0.u8(..8) == 0 { 2 } else { 1 } {
            let mut inner = serde_json::Map::new();
            if self.0.u8(..10) != 0 {
                let table = if self.0.u8(..10) == 0 {
                    self.scalar()
                } else {
                    json!(self.pick(&TABLES))
                };
                inner.insert("TableName".into(), table);
            }
            match self.0.u8(..4) {
                0 => {
                    inner.insert("Item".into(), self.maybe_item());
                }
                1 => {
                    inner.insert("Key".into(), self.maybe_item());
                    inner.insert("ExpressionAttributeValues".into(), self.maybe_item());
                }
                2 => {
                    inner.insert("Key".into(), self.item(1));
                }
                _ => {}
            }
            let kind = self.pick(&["Put", "Update", "Delete", "ConditionCheck", "Get"]);
            let inner = if self.0.u8(..12) == 0 {
                self.scalar()
            } else {
                Value::Object(inner)
            };
            action.insert(kind.into(), inner);
        }
        Value::Object(action)
    }

    /// A request body with some of every field any operation reads, in a random
    /// order, and a field none reads.
    fn body(&mut self) -> Value {
        let mut fields: Vec<(&str, Value)> = Vec::new();
        let mut add = |rng: &mut Bodies, name: &'static str, value: Value| {
            if rng.0.u8(..4) != 0 {
                fields.push((name, value));
            }
        };
        let table = if self.0.u8(..8) == 0 {
            self.scalar()
        } else {
            json!(self.pick(&TABLES))
        };
        add(self, "TableName", table);
        let consistent = if self.0.bool() {
            json!(self.0.bool())
        } else {
            self.scalar()
        };
        add(self, "ConsistentRead", consistent);
        let item = self.maybe_item();
        add(self, "Item", item);
        let key = self.maybe_item();
        add(self, "Key", key);
        let values = self.maybe_item();
        add(self, "ExpressionAttributeValues", values);
        let write = self.0.bool();
        let items = self.request_items(write);
        add(self, "RequestItems", items);
        let actions = if self.0.u8(..10) == 0 {
            self.any(2)
        } else {
            let n = self.0.usize(..8);
            Value::Array((0..n).map(|_| self.action()).collect())
        };
        add(self, "TransactItems", actions);
        let other = self.any(3);
        add(self, "ReturnConsumedCapacity", other);
        self.0.shuffle(&mut fields);
        let map: serde_json::Map<String, Value> =
            fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Value::Object(map)
    }
}

#[test]
fn the_reader_without_a_tree_costs_what_the_tree_did() {
    const OPERATIONS: [&str; 10] = [
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "GetItem",
        "Query",
        "BatchWriteItem",
        "BatchGetItem",
        "TransactWriteItems",
        "TransactGetItems",
        "DescribeTable",
    ];
    let mut bodies = Bodies(fastrand::Rng::with_seed(49));
    let mut costed = 0;
    for case in 0..800 {
        let body = bodies.body();
        let text = if case % 5 == 0 {
            serde_json::to_string_pretty(&body).unwrap()
        } else {
            body.to_string()
        };
        for operation in OPERATIONS {
            let old = tree::estimate(operation, text.as_bytes());
            costed += usize::from(
                old.as_ref()
                    .is_some_and(|c| c.iter().any(|c| c.units > 1.0)),
            );
            assert_eq!(
                general::estimate(operation, text.as_bytes()),
                old,
                "{operation} {text}"
            );
        }
        let item = bodies.maybe_item();
        assert_eq!(
            general::item_size(item.to_string().as_bytes()),
            item.as_object().map(tree::item_size),
            "{item}"
        );
    }
    // Not only the trivial cases.
    assert!(costed > 300, "{costed}");
    for odd in [&b"[]"[..], b"{} x", b"not json", b"", b"{\"Item\": "] {
        for operation in OPERATIONS {
            assert_eq!(
                general::estimate(operation, odd),
                tree::estimate(operation, odd)
            );
        }
    }
}
