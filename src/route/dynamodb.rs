//! DynamoDB's units of capacity as its requests and answers name them: the operation's
//! access kind (read, write, control plane), the tables a request touches, and the
//! throttled resources an error's `ThrottlingReasons` lists.

/// What an operation does to its tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Control,
}

impl Access {
    /// The lane name's suffix; `None` for the control plane, which has one lane.
    pub fn suffix(self) -> Option<&'static str> {
        match self {
            Access::Read => Some("read"),
            Access::Write => Some("write"),
            Access::Control => None,
        }
    }
}

/// The operation named by `X-Amz-Target` and what it does.
pub fn operation(target: &str) -> Option<(&str, Access)> {
    let (_, op) = target.split_once('.')?;
    let access = match op {
        "PutItem" | "UpdateItem" | "DeleteItem" | "BatchWriteItem" | "TransactWriteItems" => {
            Access::Write
        }
        "GetItem" | "Query" | "Scan" | "BatchGetItem" | "TransactGetItems" => Access::Read,
        _ => Access::Control,
    };
    Some((op, access))
}

/// The tables a request names (interim: top-level `TableName` and `RequestItems`).
pub fn tables(_operation: &str, body: &[u8]) -> Vec<String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    if let Some(name) = value.get("TableName").and_then(|v| v.as_str()) {
        return vec![name.to_string()];
    }
    value
        .get("RequestItems")
        .and_then(|v| v.as_object())
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// A stable hash of a single-item request's partition key (interim: none).
pub fn partition_key(_operation: &str, _body: &[u8], _attribute: Option<&str>) -> Option<u64> {
    None
}

/// One entry of a throttling error's `ThrottlingReasons` (interim: none parsed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    /// The upstream's words: `TableWriteKeyRangeThroughputExceeded`.
    pub reason: String,
    /// The throttled resource's ARN.
    pub resource: String,
    /// The base table (an index's table for an index).
    pub table: String,
    /// Read or write, when the reason says.
    pub access: Option<Access>,
    /// A hot partition (`KeyRangeThroughputExceeded`).
    pub key_range: bool,
}

/// The `ThrottlingReasons` of an error body (interim: none).
pub fn throttling_reasons(_body: &[u8]) -> Vec<Reason> {
    Vec::new()
}
