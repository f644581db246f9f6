use serde_json::json;

use super::*;

fn size(item: Value) -> u64 {
    item_size(item.as_object().unwrap())
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
