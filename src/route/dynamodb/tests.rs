//! Facts about DynamoDB requests and answers, as tables of inputs and what each gives.

use super::*;

fn names(tables: &Tables<'_>) -> Vec<String> {
    tables.iter().map(str::to_owned).collect()
}

#[test]
fn operations_are_classified_from_the_target_header() {
    let cases = [
        (
            "DynamoDB_20120810.PutItem",
            Some(("PutItem", Access::Write)),
        ),
        (
            "DynamoDB_20120810.UpdateItem",
            Some(("UpdateItem", Access::Write)),
        ),
        (
            "DynamoDB_20120810.DeleteItem",
            Some(("DeleteItem", Access::Write)),
        ),
        (
            "DynamoDB_20120810.BatchWriteItem",
            Some(("BatchWriteItem", Access::Write)),
        ),
        (
            "DynamoDB_20120810.TransactWriteItems",
            Some(("TransactWriteItems", Access::Write)),
        ),
        ("DynamoDB_20120810.GetItem", Some(("GetItem", Access::Read))),
        ("DynamoDB_20120810.Query", Some(("Query", Access::Read))),
        ("DynamoDB_20120810.Scan", Some(("Scan", Access::Read))),
        (
            "DynamoDB_20120810.BatchGetItem",
            Some(("BatchGetItem", Access::Read)),
        ),
        (
            "DynamoDB_20120810.TransactGetItems",
            Some(("TransactGetItems", Access::Read)),
        ),
        (
            "DynamoDB_20120810.CreateTable",
            Some(("CreateTable", Access::Control)),
        ),
        (
            "DynamoDB_20120810.DescribeTable",
            Some(("DescribeTable", Access::Control)),
        ),
        (
            "DynamoDB_20120810.ListTables",
            Some(("ListTables", Access::Control)),
        ),
        (
            "DynamoDB_20120810.UpdateTable",
            Some(("UpdateTable", Access::Control)),
        ),
        (
            "DynamoDB_20120810.DescribeLimits",
            Some(("DescribeLimits", Access::Control)),
        ),
        (
            "DynamoDB_20120810.ExecuteStatement",
            Some(("ExecuteStatement", Access::Control)),
        ),
        (
            "DynamoDB_20120810.BatchExecuteStatement",
            Some(("BatchExecuteStatement", Access::Control)),
        ),
        (
            "DynamoDB_20120810.ExecuteTransaction",
            Some(("ExecuteTransaction", Access::Control)),
        ),
        (
            "DynamoDBStreams_20120810.GetRecords",
            Some(("GetRecords", Access::Control)),
        ),
        ("Kinesis_20131202.PutRecord", None),
        ("DynamoDB_20120810.", None),
        ("DynamoDB_20120810", None),
        (
            "DynamoDB_20991231.PutItem",
            Some(("PutItem", Access::Write)),
        ),
        ("", None),
    ];
    for (target, want) in cases {
        assert_eq!(operation(target), want, "{target}");
        assert_eq!(operation_in(target.as_bytes()), want, "{target} as bytes");
    }
    assert_eq!(operation_in(b"DynamoDB_20120810.Put\xffItem"), None);
    assert_eq!(operation_in(b"\xff.PutItem"), None);
}

#[test]
fn arns_name_their_base_table_and_index() {
    let cases = [
        ("orders", ("orders", None)),
        (
            "arn:aws:dynamodb:us-east-1:123456789012:table/orders",
            ("orders", None),
        ),
        (
            "arn:aws:dynamodb:us-east-1:123456789012:table/orders/index/by-date",
            ("orders", Some("by-date")),
        ),
        (
            "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/Orders.v2",
            ("Orders.v2", None),
        ),
        (
            "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2024-01-01T00:00:00.000",
            ("orders", None),
        ),
        (
            "arn:aws:dynamodb:us-east-1:123456789012:global-table/orders",
            (
                "arn:aws:dynamodb:us-east-1:123456789012:global-table/orders",
                None,
            ),
        ),
        ("arn:aws:dynamodb", ("arn:aws:dynamodb", None)),
    ];
    for (arn, want) in cases {
        assert_eq!(resource(arn), want, "{arn}");
    }
}

#[test]
fn tables_come_from_the_request_body() {
    let cases: [(&str, &str, &[&str]); 19] = [
        (
            "PutItem",
            r#"{"TableName":"t","Item":{"pk":{"S":"1"}}}"#,
            &["t"],
        ),
        // A leading `TableName` is read without the walk, alike.
        (
            "PutItem",
            r#"{"TableName":"arn:aws:dynamodb:us-east-1:1:table/t/index/i","Item":{}}"#,
            &["t"],
        ),
        ("PutItem", r#"{"TableName":"","Item":{}}"#, &[]),
        ("PutItem", r#"{"TableName":"a\"b","Item":{}}"#, &["a\"b"]),
        ("PutItem", r#"{"TableName":"abc"#, &[]),
        ("GetItem", r#"{"TableName":"t\xff"}"#, &[]),
        (
            "PutItem",
            r#"{"Item":{"TableName":{"S":"decoy"}},"TableName":"real"}"#,
            &["real"],
        ),
        (
            "Query",
            r#" { "TableName" : "arn:aws:dynamodb:eu-west-1:1:table/q" , "IndexName":"i"}"#,
            &["q"],
        ),
        ("GetItem", r#"{"TableName":"caf\u00e9"}"#, &["café"]),
        ("GetItem", r#"{"TableName":"注文"}"#, &["注文"]),
        ("ListTables", r#"{"Limit":10}"#, &[]),
        ("PutItem", r#"{"TableName":42}"#, &[]),
        ("PutItem", "not json", &[]),
        ("PutItem", "", &[]),
        ("PutItem", r#"{"Item":{"pk":{"S":"1"}"#, &[]),
        (
            "BatchWriteItem",
            r#"{"RequestItems":{"b":[{"PutRequest":{"Item":{}}}],"a":[],"arn:aws:dynamodb:us-east-1:1:table/b":[]},"ReturnConsumedCapacity":"TOTAL"}"#,
            &["a", "b"],
        ),
        (
            "BatchGetItem",
            r#"{"RequestItems":{"z":{"Keys":[{"pk":{"S":"]}"}}]},"y":{"Keys":[]}}}"#,
            &["y", "z"],
        ),
        (
            "TransactWriteItems",
            r#"{"ClientRequestToken":"x","TransactItems":[
                {"Put":{"Item":{"TableName":{"S":"decoy"}},"TableName":"orders"}},
                {"Update":{"TableName":"stock","Key":{"pk":{"S":"1"}}}},
                {"Delete":{"TableName":"orders","Key":{}}},
                {"ConditionCheck":{"Key":{},"TableName":"arn:aws:dynamodb:us-east-1:1:table/audit"}}]}"#,
            &["audit", "orders", "stock"],
        ),
        (
            "TransactGetItems",
            r#"{"TransactItems":[{"Get":{"TableName":"b"}},{"Get":{"Key":{},"TableName":"a"}}]}"#,
            &["a", "b"],
        ),
    ];
    for (op, body, want) in cases {
        let got = tables(op, body.as_bytes());
        assert_eq!(names(&got), want, "{op} {body}");
        assert_eq!(got.len(), want.len());
        assert_eq!(got.is_empty(), want.is_empty());
        for name in want {
            assert!(got.contains(name));
        }
    }
}

#[test]
fn a_table_name_that_is_not_utf8_names_no_table() {
    assert!(tables("PutItem", b"{\"TableName\":\"t\xff\",\"Item\":{}}").is_empty());
    assert!(tables("PutItem", b"{\"Item\":{},\"TableName\":\"t\xff\"}").is_empty());
}

#[test]
fn a_truncated_batch_keeps_the_tables_read_before_the_fault() {
    let body = br#"{"RequestItems":{"a":[],"b":[{"PutRequest":"#;
    assert_eq!(names(&tables("BatchWriteItem", body)), ["a", "b"]);
}

#[test]
fn table_names_without_escapes_are_borrowed_from_the_body() {
    let got = tables("PutItem", br#"{"TableName":"t"}"#);
    assert!(matches!(got.as_slice(), [Cow::Borrowed("t")]));
    let owned = got.into_owned();
    assert_eq!(names(&owned), ["t"]);
}

const MIB16: usize = 16 << 20;

/// `{"PREFIX":[{"S":"xxxx..."}, ...], ...}` of about `size` bytes of item data.
fn items(size: usize) -> String {
    let item = format!(
        r#"{{"PutRequest":{{"Item":{{"pk":{{"S":"{}"}}}}}}}}"#,
        "x".repeat(4000)
    );
    let n = size / item.len() + 1;
    let mut out = String::with_capacity(n * (item.len() + 1) + 2);
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item);
    }
    out.push(']');
    out
}

#[test]
fn a_table_name_ahead_of_16_mib_of_items_is_read_without_looking_at_them() {
    let head = r#"{"TableName":"big","Item":"#;
    let body = format!("{head}{}}}", items(MIB16));
    assert!(body.len() > MIB16);
    let (got, consumed) = scan_tables("PutItem", body.as_bytes());
    assert_eq!(names(&got), ["big"]);
    assert_eq!(consumed, r#"{"TableName":"big""#.len());
}

#[test]
fn a_16_mib_batch_is_read_up_to_the_end_of_its_request_items_and_no_further() {
    let request_items = format!(r#"{{"a":{},"b":[]}}"#, items(MIB16));
    let body = format!(
        r#"{{"RequestItems":{request_items},"ReturnItemCollectionMetrics":{}}}"#,
        items(MIB16)
    );
    let (got, consumed) = scan_tables("BatchWriteItem", body.as_bytes());
    assert_eq!(names(&got), ["a", "b"]);
    assert_eq!(consumed, r#"{"RequestItems":"#.len() + request_items.len());
    assert!(consumed < body.len() / 2 + 1024);
}

#[test]
fn partition_keys_hash_the_chosen_attribute_value() {
    let h = |op: &str, body: &str, attr: Option<&str>| partition_key(op, body.as_bytes(), attr);
    let user1 = h("PutItem", r#"{"Item":{"pk":{"S":"user#1"}}}"#, None);
    assert!(user1.is_some());
    let cases = [
        // The first attribute in body order, wherever Item stands.
        (
            "PutItem",
            r#"{"TableName":"t","Item":{"pk":{"S":"user#1"},"sk":{"N":"2"}}}"#,
            None,
            user1,
        ),
        (
            "PutItem",
            r#"{"Item":{"pk": { "S" : "user#1" }},"TableName":"t"}"#,
            None,
            user1,
        ),
        (
            "GetItem",
            r#"{"TableName":"t","Key":{"pk":{"S":"user#1"}}}"#,
            None,
            user1,
        ),
        (
            "UpdateItem",
            r#"{"Key":{"sk":{"N":"2"},"pk":{"S":"user#1"}}}"#,
            Some("pk"),
            user1,
        ),
        (
            "DeleteItem",
            r#"{"Key":{"sk":{"N":"2"},"pk":{"S":"user#1"}}}"#,
            Some("pk"),
            user1,
        ),
        (
            "DeleteItem",
            r#"{"Key":{"sk":{"N":"2"}}}"#,
            Some("pk"),
            None,
        ),
        ("PutItem", r#"{"Key":{"pk":{"S":"user#1"}}}"#, None, None),
        ("GetItem", r#"{"Item":{"pk":{"S":"user#1"}}}"#, None, None),
        ("Query", r#"{"Key":{"pk":{"S":"user#1"}}}"#, None, None),
        ("PutItem", r#"{"Item":{}}"#, None, None),
        ("PutItem", "garbage", None, None),
    ];
    for (op, body, attr, want) in cases {
        assert_eq!(h(op, body, attr), want, "{op} {body} {attr:?}");
    }
}

#[test]
fn partition_key_hashes_tell_values_and_types_apart_and_are_stable() {
    let h = |item: &str| partition_key("PutItem", format!(r#"{{"Item":{item}}}"#).as_bytes(), None);
    let values = [
        r#"{"pk":{"S":"user#1"}}"#,
        r#"{"pk":{"S":"user#2"}}"#,
        r#"{"pk":{"N":"1"}}"#,
        r#"{"pk":{"S":"1"}}"#,
        r#"{"pk":{"S":"user #1"}}"#,
        r#"{"pk":{"S":"ユーザー"}}"#,
    ];
    let hashes: Vec<_> = values.iter().map(|v| h(v)).collect();
    for (i, a) in hashes.iter().enumerate() {
        for b in &hashes[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // FNV-1a of `{"S":"a"}` (computed independently): a fixed number, so every process agrees.
    assert_eq!(h(r#"{"pk":{"S":"a"}}"#), Some(0x89f4_3c41_7200_7941));
}

#[test]
fn documented_reason_strings_are_understood() {
    let resources = [
        (ResourceType::Table, "Table"),
        (ResourceType::Index, "Index"),
    ];
    let accesses = [(Access::Read, "Read"), (Access::Write, "Write")];
    for (resource_type, r) in resources {
        for (access, a) in accesses {
            for (l, limit) in Limit::ALL {
                let reason = format!("{r}{a}{l}");
                assert_eq!(
                    parse_reason(&reason),
                    (Some(resource_type), Some(access), Some(limit)),
                    "{reason}"
                );
                assert_eq!(limit.as_str(), l);
            }
        }
    }
    assert_eq!(
        parse_reason("TableWriteSomethingNew"),
        (Some(ResourceType::Table), Some(Access::Write), None)
    );
    assert_eq!(
        parse_reason("TableDeleteProvisionedThroughputExceeded"),
        (Some(ResourceType::Table), None, None)
    );
    assert_eq!(parse_reason("Throttled"), (None, None, None));
    assert_eq!(parse_reason(""), (None, None, None));
}

#[test]
fn throttling_reasons_name_tables_indexes_access_and_limit() {
    let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message":"Throughput exceeds the current capacity of your table or index.",
        "ThrottlingReasons":[
          {"reason":"TableWriteKeyRangeThroughputExceeded","resource":"arn:aws:dynamodb:us-west-2:123456789012:table/orders"},
          {"resource":"arn:aws:dynamodb:us-west-2:123456789012:table/orders/index/by-customer","reason":"IndexReadProvisionedThroughputExceeded"},
          {"reason":"TableReadMaxOnDemandThroughputExceeded","resource":"arn:aws:dynamodb:us-west-2:123456789012:table/caf\u00e9"},
          {"reason":"SomethingNew","resource":"arn:aws:dynamodb:us-west-2:123456789012:table/t","extra":[1,{"a":2}]},
          {"reason":"IndexWriteAccountLimitExceeded"},
          {"reason":null,"resource":"orders"}
        ]}"#;
    let got = throttling_reasons(body.as_bytes());
    let summary: Vec<_> = got
        .iter()
        .map(|r| {
            (
                r.table.as_deref(),
                r.index.as_deref(),
                r.resource_type,
                r.access,
                r.limit,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                Some("orders"),
                None,
                Some(ResourceType::Table),
                Some(Access::Write),
                Some(Limit::KeyRangeThroughputExceeded)
            ),
            (
                Some("orders"),
                Some("by-customer"),
                Some(ResourceType::Index),
                Some(Access::Read),
                Some(Limit::ProvisionedThroughputExceeded)
            ),
            (
                Some("café"),
                None,
                Some(ResourceType::Table),
                Some(Access::Read),
                Some(Limit::MaxOnDemandThroughputExceeded)
            ),
            (Some("t"), None, None, None, None),
            (
                None,
                None,
                Some(ResourceType::Index),
                Some(Access::Write),
                Some(Limit::AccountLimitExceeded)
            ),
            (Some("orders"), None, None, None, None),
        ]
    );
    assert_eq!(got[0].reason, "TableWriteKeyRangeThroughputExceeded");
    assert_eq!(
        got[1].resource,
        "arn:aws:dynamodb:us-west-2:123456789012:table/orders/index/by-customer"
    );
    assert_eq!(got[4].resource, "");
    assert_eq!(got[5].reason, "");
}

#[test]
fn bodies_without_throttling_reasons_give_none() {
    let cases = [
        r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"m"}"#,
        r#"{"ThrottlingReasons":[]}"#,
        r#"{"ThrottlingReasons":null}"#,
        r#"{"ThrottlingReasons":"TableWriteProvisionedThroughputExceeded"}"#,
        "<ErrorResponse><Code>Throttling</Code></ErrorResponse>",
        "",
        "[]",
        r#"{"message":"ThrottlingReasons"#,
    ];
    for body in cases {
        assert_eq!(throttling_reasons(body.as_bytes()), [], "{body}");
    }
}

#[test]
fn a_truncated_reason_list_keeps_the_complete_entries() {
    let body = br#"{"ThrottlingReasons":[{"reason":"TableReadProvisionedThroughputExceeded","resource":"a"},{"reason":"Tab"#;
    let got = throttling_reasons(body);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].table.as_deref(), Some("a"));
}

#[test]
fn lower_camel_case_reason_lists_are_read_too() {
    let body = br#"{"message":"Rate exceeded","throttlingReasons":[{"Reason":"TableReadProvisionedThroughputExceeded","Resource":"t"}]}"#;
    let got = throttling_reasons(body);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].access, Some(Access::Read));
}

#[test]
fn unprocessed_tables_are_those_with_entries_left() {
    let cases: [(&str, &[&str]); 8] = [
        (
            r#"{"UnprocessedItems":{"b":[{"PutRequest":{"Item":{}}}],"a":[{"DeleteRequest":{}}],"c":[]}}"#,
            &["a", "b"],
        ),
        (
            r#"{"Responses":{"x":[{"UnprocessedKeys":{"S":"decoy"}}]},"UnprocessedKeys":{"y":{"Keys":[{"pk":{"S":"1"}}]},"z":{ }}}"#,
            &["y"],
        ),
        (
            r#"{"UnprocessedItems":{"arn:aws:dynamodb:us-east-1:1:table/t":[1]}}"#,
            &["t"],
        ),
        (r#"{"UnprocessedItems":{}}"#, &[]),
        (r#"{"UnprocessedItems":{"t":[ ]}}"#, &[]),
        (r#"{"ConsumedCapacity":[]}"#, &[]),
        ("{}", &[]),
        ("not json", &[]),
    ];
    for (body, want) in cases {
        assert_eq!(names(&unprocessed_tables(body.as_bytes())), want, "{body}");
    }
}

#[test]
fn request_items_give_each_tables_raw_value() {
    let body = br#"{"RequestItems":{"a":[{"PutRequest":{"Item":{"pk":{"S":"1"}}}}],"arn:aws:dynamodb:us-east-1:1:table/b" : [ ] }}"#;
    let got = request_items(body);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, "a");
    assert_eq!(got[0].1, br#"[{"PutRequest":{"Item":{"pk":{"S":"1"}}}}]"#);
    assert_eq!(got[1].0, "arn:aws:dynamodb:us-east-1:1:table/b");
    assert_eq!(got[1].1, b"[ ]");
    assert!(request_items(b"{}").is_empty());
}

#[test]
fn json_strings_with_escaped_quotes_do_not_end_early() {
    let body = br#"{"Item":{"pk":{"S":"a\"}],\\"}},"TableName":"t"}"#;
    assert_eq!(names(&tables("PutItem", body)), ["t"]);
    assert!(partition_key("PutItem", body, None).is_some());
}
