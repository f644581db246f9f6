//! Sizes and prices worked out by hand from the rules on the AWS pages the module cites.

use serde_json::json;

use super::*;

fn size(item: &Value) -> u64 {
    item_size(Some(item))
}

/// An item `{"pk": {"S": "a"}, "v": {"S": "xxx…"}}` of exactly `bytes` bytes.
fn item_of(bytes: usize) -> Value {
    // "pk" + "a" = 3, "v" = 1.
    json!({"pk": {"S": "a"}, "v": {"S": "x".repeat(bytes - 4)}})
}

fn price(operation: &str, body: &Value) -> f64 {
    units(operation, body.to_string().as_bytes())
}

#[test]
fn a_string_is_its_name_and_its_utf8_bytes() {
    assert_eq!(size(&json!({"Name": {"S": "Alice"}})), 4 + 5);
    // "é" is two bytes in UTF-8, and so is "ü" in the name.
    assert_eq!(size(&json!({"nüm": {"S": "né"}})), 4 + 3);
    assert_eq!(size(&json!({"e": {"S": ""}})), 1);
}

#[test]
fn a_number_is_a_byte_per_two_significant_digits_and_one_more() {
    // 123.45: five significant digits, three bytes, and one.
    assert_eq!(number_size("123.45"), 4);
    assert_eq!(size(&json!({"price": {"N": "123.45"}})), 5 + 4);
    // Leading and trailing zeroes are trimmed.
    assert_eq!(number_size("1000"), 2);
    assert_eq!(number_size("0.001"), 2);
    assert_eq!(number_size("-0012.3000"), 3);
    assert_eq!(number_size("12"), 2);
    assert_eq!(number_size("0"), 1);
    // The exponent does not count.
    assert_eq!(number_size("1.5E3"), 2);
    // 38 significant digits, DynamoDB's most: 19 bytes and one.
    assert_eq!(number_size(&"9".repeat(38)), 20);
}

#[test]
fn null_and_boolean_are_one_byte() {
    assert_eq!(size(&json!({"x": {"NULL": true}})), 2);
    assert_eq!(size(&json!({"ok": {"BOOL": false}})), 3);
}

#[test]
fn binary_is_its_raw_bytes_not_its_base64() {
    assert_eq!(binary_size("AAEC"), 3);
    assert_eq!(binary_size("AAE="), 2);
    assert_eq!(binary_size("AA=="), 1);
    assert_eq!(binary_size(""), 0);
    // Unpadded base64 too.
    assert_eq!(binary_size("AAE"), 2);
    // "hello world" is 11 bytes, 16 characters of base64.
    assert_eq!(size(&json!({"b": {"B": "aGVsbG8gd29ybGQ="}})), 1 + 11);
}

#[test]
fn a_nested_map_and_a_list_carry_three_bytes_and_one_per_element() {
    // city: 4 + 5 + 1; zip (75001, five digits: 3 + 1): 3 + 4 + 1; the map: 3.
    let item = json!({"address": {"M": {"city": {"S": "Paris"}, "zip": {"N": "75001"}}}});
    assert_eq!(size(&item), 7 + 3 + 10 + 8);
    // Each element: its size and one byte.
    let item = json!({"tags": {"L": [{"S": "a"}, {"BOOL": true}]}});
    assert_eq!(size(&item), 4 + 3 + (1 + 1) + (1 + 1));
    assert_eq!(size(&json!({"l": {"L": []}, "m": {"M": {}}})), (1 + 3) * 2);
    // A map in a list in a map.
    let item = json!({"a": {"M": {"b": {"L": [{"M": {"c": {"S": "d"}}}]}}}});
    let inner = 3 + (1 + 1 + 1);
    let list = 3 + (inner + 1);
    assert_eq!(size(&item), 1 + 3 + (1 + list + 1));
}

#[test]
fn a_set_is_the_sum_of_its_elements() {
    assert_eq!(size(&json!({"s": {"SS": ["ab", "c"]}})), 1 + 3);
    assert_eq!(
        size(&json!({"n": {"NS": ["1", "22", "123.45"]}})),
        1 + 2 + 2 + 4
    );
    assert_eq!(size(&json!({"b": {"BS": ["AA==", "AAE="]}})), 1 + 3);
}

#[test]
fn a_put_takes_a_write_unit_per_kb_rounded_up() {
    let put = |item: Value| price("PutItem", &json!({"TableName": "t", "Item": item}));
    assert_eq!(size(&item_of(8192)), 8192);
    assert_eq!(put(item_of(8192)), 8.0);
    assert_eq!(put(item_of(8193)), 9.0);
    assert_eq!(put(item_of(1024)), 1.0);
    assert_eq!(put(item_of(1025)), 2.0);
    assert_eq!(put(item_of(10)), 1.0);
    // An empty item still takes one.
    assert_eq!(put(json!({})), 1.0);
}

#[test]
fn updates_and_deletes_are_priced_by_their_key_and_values() {
    // Key: "pk" + "k" = 3; the value: 1,100; 1,103 bytes.
    let update = json!({
        "TableName": "t",
        "Key": {"pk": {"S": "k"}},
        "UpdateExpression": "SET v = :v",
        "ExpressionAttributeValues": {":v": {"S": "x".repeat(1100)}},
    });
    assert_eq!(price("UpdateItem", &update), 2.0);
    let legacy = json!({
        "TableName": "t",
        "Key": {"pk": {"S": "k"}},
        "AttributeUpdates": {"v": {"Value": {"S": "x".repeat(1100)}, "Action": "PUT"}},
    });
    assert_eq!(price("UpdateItem", &legacy), 2.0);
    let delete = json!({"TableName": "t", "Key": {"pk": {"S": "k"}}});
    assert_eq!(price("DeleteItem", &delete), 1.0);
}

#[test]
fn a_batch_of_three_items_is_rounded_up_item_by_item() {
    // 1,025 + 1,025 + 10 bytes: 2 + 2 + 1 units, not ceil(2,060 / 1,024) = 3.
    let batch = json!({"RequestItems": {"t": [
        {"PutRequest": {"Item": item_of(1025)}},
        {"PutRequest": {"Item": item_of(1025)}},
        {"PutRequest": {"Item": item_of(10)}},
    ]}});
    assert_eq!(price("BatchWriteItem", &batch), 5.0);
    // Deletes by their key, across tables.
    let batch = json!({"RequestItems": {
        "a": [{"DeleteRequest": {"Key": {"pk": {"S": "k"}}}}],
        "b": [{"PutRequest": {"Item": item_of(3000)}}],
    }});
    assert_eq!(price("BatchWriteItem", &batch), 1.0 + 3.0);
    assert_eq!(price("BatchWriteItem", &json!({"RequestItems": {}})), 1.0);
}

#[test]
fn a_transaction_costs_double() {
    let transaction = json!({"TransactItems": [
        {"Put": {"TableName": "t", "Item": item_of(1025)}},
        {"Update": {"TableName": "t", "Key": {"pk": {"S": "k"}}, "UpdateExpression": "SET n = n + :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}},
        {"Delete": {"TableName": "t", "Key": {"pk": {"S": "j"}}}},
        {"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": "i"}}, "ConditionExpression": "attribute_exists(pk)"}},
    ]});
    assert_eq!(
        price("TransactWriteItems", &transaction),
        4.0 + 2.0 + 2.0 + 2.0
    );
}

#[test]
fn reads_take_one_unit_strongly_consistent_and_half_otherwise() {
    let key = json!({"pk": {"S": "k"}});
    assert_eq!(
        price("GetItem", &json!({"TableName": "t", "Key": key})),
        0.5
    );
    let consistent = json!({"TableName": "t", "Key": key, "ConsistentRead": true});
    assert_eq!(price("GetItem", &consistent), 1.0);
    let eventual = json!({"TableName": "t", "Key": key, "ConsistentRead": false});
    assert_eq!(price("GetItem", &eventual), 0.5);
    let batch = json!({"RequestItems": {
        "a": {"Keys": [key, key, key], "ConsistentRead": true},
        "b": {"Keys": [key, key]},
    }});
    assert_eq!(price("BatchGetItem", &batch), 3.0 + 1.0);
    let transaction = json!({"TransactItems": [
        {"Get": {"TableName": "t", "Key": key}},
        {"Get": {"TableName": "t", "Key": key}},
    ]});
    assert_eq!(price("TransactGetItems", &transaction), 4.0);
}

#[test]
fn other_operations_and_bodies_that_are_not_json_take_one() {
    assert_eq!(price("Query", &json!({"TableName": "t"})), 1.0);
    assert_eq!(price("DescribeTable", &json!({"TableName": "t"})), 1.0);
    assert_eq!(units("PutItem", b"not json"), 1.0);
    assert_eq!(units("PutItem", b""), 1.0);
}
