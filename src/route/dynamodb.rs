//! DynamoDB's units of capacity as its requests and answers name them: the operation's
//! access kind (read, write, control plane), the tables a request touches, the
//! partition key it reads or writes, and the throttled resources an error's
//! `ThrottlingReasons` lists. Pure functions of a header value and body bytes.
//!
//! Bodies are not parsed whole: items reach 400 KB and batches 16 MB. Each function
//! reads the top-level keys it needs, skips other values by matching brackets without
//! decoding them, and stops once it has its answer. A body it cannot follow (not JSON,
//! truncated) gives what was found before the fault, usually nothing; never an error.

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use super::json::{self, Cursor, Flow, Str, top_level};

/// What an operation does to a table's capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Consumes read capacity: GetItem, Query, Scan, BatchGetItem, TransactGetItems.
    Read,
    /// Consumes write capacity: PutItem, UpdateItem, DeleteItem, BatchWriteItem,
    /// TransactWriteItems.
    Write,
    /// Everything else: table management, descriptions, backups, streams and PartiQL.
    Control,
}

impl Access {
    /// `read`, `write` or `control`, as lane names and metric labels spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Control => "control",
        }
    }
}

/// The operation named by an `X-Amz-Target` header value and its access kind, e.g.
/// `DynamoDB_20120810.PutItem` → `("PutItem", Write)`; `None` for another service.
///
/// DynamoDB Streams (`DynamoDBStreams_20120810.*`) is [`Access::Control`]. So are the
/// PartiQL operations (ExecuteStatement, BatchExecuteStatement, ExecuteTransaction):
/// whether they read or write, and which table, is in the statement text, which this
/// does not parse.
pub fn operation(target: &str) -> Option<(&str, Access)> {
    let (service, operation) = target.split_once('.')?;
    if operation.is_empty() {
        return None;
    }
    if service.starts_with("DynamoDBStreams_") {
        return Some((operation, Access::Control));
    }
    service
        .starts_with("DynamoDB_")
        .then(|| (operation, access(operation)))
}

/// [`operation`] of a header's bytes. Every SDK sends the same API version and the
/// data-plane operations are few, so the common header is matched without a UTF-8
/// check.
pub fn operation_in(target: &[u8]) -> Option<(&str, Access)> {
    if let Some(name) = target.strip_prefix(b"DynamoDB_20120810.")
        && let Some(&(name, access)) = DATA_PLANE.iter().find(|(op, _)| op.as_bytes() == name)
    {
        return Some((name, access));
    }
    operation(std::str::from_utf8(target).ok()?)
}

/// The operations that use a table's read or write capacity; all others are
/// [`Access::Control`].
const DATA_PLANE: [(&str, Access); 10] = [
    ("PutItem", Access::Write),
    ("GetItem", Access::Read),
    ("UpdateItem", Access::Write),
    ("Query", Access::Read),
    ("DeleteItem", Access::Write),
    ("BatchWriteItem", Access::Write),
    ("BatchGetItem", Access::Read),
    ("Scan", Access::Read),
    ("TransactWriteItems", Access::Write),
    ("TransactGetItems", Access::Read),
];

/// The access kind of a DynamoDB operation name (`PutItem`, `Query`, ...).
pub fn access(operation: &str) -> Access {
    DATA_PLANE
        .iter()
        .find(|(op, _)| *op == operation)
        .map_or(Access::Control, |&(_, access)| access)
}

/// The base table named by a table name or ARN:
/// `arn:aws:dynamodb:us-east-1:123456789012:table/orders` and
/// `arn:...:table/orders/index/by-date` → `orders`; a plain name is returned as it is.
pub fn table_name(name: &str) -> &str {
    resource(name).0
}

/// A table or index ARN split into the base table and the index, if any; a string that
/// is not a table ARN is taken as a plain table name.
pub fn resource(arn: &str) -> (&str, Option<&str>) {
    // arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE, and RESOURCE may hold colons.
    let Some(path) = arn
        .strip_prefix("arn:")
        .and_then(|rest| rest.splitn(5, ':').nth(4))
        .and_then(|path| path.strip_prefix("table/"))
    else {
        return (arn, None);
    };
    let mut parts = path.split('/');
    let table = parts.next().unwrap_or(path);
    let index = match (parts.next(), parts.next()) {
        (Some("index"), Some(index)) if !index.is_empty() => Some(index),
        _ => None,
    };
    (table, index)
}

/// The distinct base table names a request touches, sorted, so that taking a slot in
/// each of their lanes in this order cannot deadlock. Names are borrowed from the body
/// unless they were written with escapes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables<'a> {
    names: Names<'a>,
}

/// The table names of [`Tables`]. One table is the common case and needs no
/// allocation beyond the name itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Names<'a> {
    /// No table.
    #[default]
    None,
    /// One table.
    One(Cow<'a, str>),
    /// Several, sorted.
    Many(Vec<Cow<'a, str>>),
}

impl<'a> Tables<'a> {
    /// The names as a sorted slice.
    pub fn as_slice(&self) -> &[Cow<'a, str>] {
        match &self.names {
            Names::None => &[],
            Names::One(name) => std::slice::from_ref(name),
            Names::Many(names) => names,
        }
    }

    /// The names, taken out.
    pub fn into_names(self) -> Names<'a> {
        self.names
    }

    /// The names in sorted order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.as_slice().iter().map(|name| name.as_ref())
    }

    /// How many distinct tables.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether no table was found.
    pub fn is_empty(&self) -> bool {
        matches!(self.names, Names::None)
    }

    /// Whether `table` is among them.
    pub fn contains(&self, table: &str) -> bool {
        self.as_slice()
            .binary_search_by(|name| name.as_ref().cmp(table))
            .is_ok()
    }

    /// The same names, owning their text.
    pub fn into_owned(self) -> Tables<'static> {
        let names = match self.names {
            Names::None => Names::None,
            Names::One(name) => Names::One(Cow::Owned(name.into_owned())),
            Names::Many(names) => Names::Many(
                names
                    .into_iter()
                    .map(|name| Cow::Owned(name.into_owned()))
                    .collect(),
            ),
        };
        Tables { names }
    }

    /// Adds a table name or ARN, normalised to the base table's name.
    fn insert(&mut self, name: Cow<'a, str>) {
        let name = match name {
            Cow::Borrowed(name) => Cow::Borrowed(table_name(name)),
            Cow::Owned(name) => match table_name(&name) {
                base if base.len() == name.len() => Cow::Owned(name),
                base => Cow::Owned(base.to_owned()),
            },
        };
        if name.is_empty() {
            return;
        }
        self.names = match std::mem::take(&mut self.names) {
            Names::None => Names::One(name),
            Names::One(first) => match first.cmp(&name) {
                std::cmp::Ordering::Equal => Names::One(first),
                std::cmp::Ordering::Less => Names::Many(vec![first, name]),
                std::cmp::Ordering::Greater => Names::Many(vec![name, first]),
            },
            Names::Many(mut names) => {
                if let Err(at) = names.binary_search(&name) {
                    names.insert(at, name);
                }
                Names::Many(names)
            }
        };
    }

    fn insert_str(&mut self, name: Str<'a>) {
        if let Some(name) = name.decode() {
            self.insert(name);
        }
    }
}

impl<'t, 'a> IntoIterator for &'t Tables<'a> {
    type Item = &'t Cow<'a, str>;
    type IntoIter = std::slice::Iter<'t, Cow<'a, str>>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

/// The tables a request of `operation` (as [`operation`] names it) touches: the keys of
/// `RequestItems` for BatchWriteItem and BatchGetItem, each `TransactItems[i].<kind>.TableName`
/// for TransactWriteItems and TransactGetItems, the top-level `TableName` otherwise.
/// Empty when the body is not JSON or names no table.
pub fn tables<'a>(operation: &str, body: &'a [u8]) -> Tables<'a> {
    scan_tables(operation, body).0
}

/// [`tables`], and how many bytes of the body it looked at.
fn scan_tables<'a>(operation: &str, body: &'a [u8]) -> (Tables<'a>, usize) {
    let mut tables = Tables::default();
    let mut cursor = Cursor::new(body);
    let _ = match operation {
        "BatchWriteItem" | "BatchGetItem" => top_level(&mut cursor, "RequestItems", |c| {
            c.object(|c, table| {
                tables.insert_str(table);
                c.skip_value().map(|()| Flow::Next)
            })
        }),
        "TransactWriteItems" | "TransactGetItems" => {
            top_level(&mut cursor, "TransactItems", |c| {
                c.array(|c| {
                    // {"Put": {...}}: one key naming the kind, whatever it is.
                    c.object(|c, _kind| {
                        c.object(|c, field| {
                            if !field.is("TableName") {
                                return c.skip_value().map(|()| Flow::Next);
                            }
                            if let Some(name) = c.string_or_skip()? {
                                tables.insert_str(name);
                            }
                            Some(Flow::Done)
                        })
                        .map(|()| Flow::Next)
                    })
                })
            })
        }
        _ => {
            if let Some((name, end)) = leading_table_name(body) {
                tables.insert(Cow::Borrowed(name));
                return (tables, end);
            }
            top_level(&mut cursor, "TableName", |c| {
                if let Some(name) = c.string_or_skip()? {
                    tables.insert_str(name);
                }
                Some(())
            })
        }
    };
    (tables, cursor.consumed())
}

/// Whether a request asks DynamoDB to answer with its `ConsumedCapacity`
/// (`ReturnConsumedCapacity` other than `NONE`); without it the answer cannot say what
/// the request cost.
pub fn asks_consumed_capacity(body: &[u8]) -> bool {
    json::top_level_string(body, "ReturnConsumedCapacity").is_some_and(|v| v != "NONE")
}

/// The table name of a body that starts `{"TableName":"NAME"`, and where it ends:
/// the start of most requests, whose SDK writes members in the API model's order or
/// in the caller's (who puts `TableName` first). `None` for any other start, which
/// the walk then reads.
fn leading_table_name(body: &[u8]) -> Option<(&str, usize)> {
    const START: &[u8] = br#"{"TableName":""#;
    let rest = body.strip_prefix(START)?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] != b'"' {
        return None;
    }
    let name = std::str::from_utf8(&rest[..end]).ok()?;
    Some((name, START.len() + end + 1))
}

/// A stable 64-bit hash of the partition key value of a single-item request: the
/// attribute `attribute` of `Key` (GetItem, UpdateItem, DeleteItem) or `Item` (PutItem).
///
/// With `attribute` `None` it takes the first attribute in body order: SDKs keep the
/// caller's order, and callers write the partition key first (`{"pk": ..., "sk": ...}`).
/// The hash (FNV-1a, no seed, the same in every process) covers the value's JSON as
/// written, type included (`{"S":"user#1"}`), minus whitespace outside strings.
/// `None` for other operations or when the body has no such attribute.
pub fn partition_key(operation: &str, body: &[u8], attribute: Option<&str>) -> Option<u64> {
    partition_key_in(item_field(operation)?, body, attribute)
}

/// The top-level field that holds a single-item request's key: `Key` or `Item`;
/// `None` for other operations.
pub fn item_field(operation: &str) -> Option<&'static str> {
    match operation {
        "GetItem" | "UpdateItem" | "DeleteItem" => Some("Key"),
        "PutItem" => Some("Item"),
        _ => None,
    }
}

/// [`partition_key`] with its field already known (see [`item_field`]).
pub fn partition_key_in(field: &str, body: &[u8], attribute: Option<&str>) -> Option<u64> {
    let mut found = None;
    let _ = top_level(&mut Cursor::new(body), field, |c| {
        c.object(|c, name| {
            if attribute.is_none_or(|wanted| name.is(wanted)) {
                found = Some(json::hash_value(c.raw_value()?));
                return Some(Flow::Done);
            }
            c.skip_value().map(|()| Flow::Next)
        })
    });
    found
}

/// Why DynamoDB throttled: the third part of a throttling reason string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Above the provisioned capacity of a table or index.
    ProvisionedThroughputExceeded,
    /// An on-demand table or index above the per-table account quota.
    AccountLimitExceeded,
    /// One partition key value above the partition's limit: a hot key.
    KeyRangeThroughputExceeded,
    /// Above an on-demand table's or index's configured maximum throughput.
    MaxOnDemandThroughputExceeded,
}

impl Limit {
    const ALL: [(&'static str, Limit); 4] = [
        (
            "ProvisionedThroughputExceeded",
            Limit::ProvisionedThroughputExceeded,
        ),
        ("AccountLimitExceeded", Limit::AccountLimitExceeded),
        (
            "KeyRangeThroughputExceeded",
            Limit::KeyRangeThroughputExceeded,
        ),
        (
            "MaxOnDemandThroughputExceeded",
            Limit::MaxOnDemandThroughputExceeded,
        ),
    ];

    /// The name as it ends a reason string, e.g. `KeyRangeThroughputExceeded`.
    pub fn as_str(self) -> &'static str {
        Limit::ALL
            .iter()
            .find(|(_, limit)| *limit == self)
            .map_or("", |(name, _)| name)
    }
}

/// Whether a reason string names a table or an index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResourceType {
    /// `Table...`
    Table,
    /// `Index...`: a global secondary index.
    Index,
}

/// One entry of a throttling error's `ThrottlingReasons`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason {
    /// The reason string as DynamoDB sent it, e.g. `TableWriteKeyRangeThroughputExceeded`;
    /// empty when absent.
    pub reason: String,
    /// The resource ARN as DynamoDB sent it; empty when absent.
    pub resource: String,
    /// The base table of the resource (an index's table); `None` without a resource.
    pub table: Option<String>,
    /// The index, when the resource is an index ARN.
    pub index: Option<String>,
    /// `Table` or `Index`, from the reason string.
    pub resource_type: Option<ResourceType>,
    /// Read or write, from the reason string; `None` when it does not say.
    pub access: Option<Access>,
    /// Which limit, from the reason string; `None` for one this does not know.
    pub limit: Option<Limit>,
}

impl Reason {
    /// A reason from its two fields, each possibly absent or unknown.
    pub fn new(reason: Option<&str>, resource: Option<&str>) -> Reason {
        let reason = reason.unwrap_or_default();
        let resource_text = resource.unwrap_or_default();
        let (table, index) = match resource {
            Some(arn) if !arn.is_empty() => {
                let (table, index) = self::resource(arn);
                (Some(table.to_owned()), index.map(str::to_owned))
            }
            _ => (None, None),
        };
        let (resource_type, access, limit) = parse_reason(reason);
        Reason {
            reason: reason.to_owned(),
            resource: resource_text.to_owned(),
            table,
            index,
            resource_type,
            access,
            limit,
        }
    }
}

/// A reason string split into ResourceType + OperationType + LimitType; each part is
/// `None` when it is not one DynamoDB documents (a later part is read only after the
/// earlier ones are known).
pub fn parse_reason(reason: &str) -> (Option<ResourceType>, Option<Access>, Option<Limit>) {
    let (resource_type, rest) = if let Some(rest) = reason.strip_prefix("Table") {
        (ResourceType::Table, rest)
    } else if let Some(rest) = reason.strip_prefix("Index") {
        (ResourceType::Index, rest)
    } else {
        return (None, None, None);
    };
    let (access, rest) = if let Some(rest) = rest.strip_prefix("Read") {
        (Access::Read, rest)
    } else if let Some(rest) = rest.strip_prefix("Write") {
        (Access::Write, rest)
    } else {
        return (Some(resource_type), None, None);
    };
    let limit = Limit::ALL
        .iter()
        .find(|(name, _)| *name == rest)
        .map(|(_, limit)| *limit);
    (Some(resource_type), Some(access), limit)
}

/// The entries of an error body's `ThrottlingReasons` list (`reason`, `resource`), in
/// body order; empty when the body has none or is not JSON.
pub fn throttling_reasons(body: &[u8]) -> Vec<Reason> {
    let mut reasons = Vec::new();
    let _ = Cursor::new(body).object(|c, key| {
        // DynamoDB spells it ThrottlingReasons; other AWS services throttlingReasons.
        if !(key.is("ThrottlingReasons") || key.is("throttlingReasons")) {
            return c.skip_value().map(|()| Flow::Next);
        }
        c.array(|c| {
            let (mut reason, mut resource) = (None, None);
            c.object(|c, field| {
                let slot = if field.is("reason") || field.is("Reason") {
                    &mut reason
                } else if field.is("resource") || field.is("Resource") {
                    &mut resource
                } else {
                    return c.skip_value().map(|()| Flow::Next);
                };
                *slot = c.string_or_skip()?.and_then(|s| s.decode());
                Some(Flow::Next)
            })?;
            reasons.push(Reason::new(reason.as_deref(), resource.as_deref()));
            Some(())
        })?;
        Some(Flow::Stop)
    });
    reasons
}

/// The tables with a non-empty entry in a success body's `UnprocessedItems`
/// (BatchWriteItem) or `UnprocessedKeys` (BatchGetItem): those whose share of the batch
/// was throttled.
pub fn unprocessed_tables(body: &[u8]) -> Tables<'_> {
    let mut tables = Tables::default();
    let _ = Cursor::new(body).object(|c, key| {
        if !(key.is("UnprocessedItems") || key.is("UnprocessedKeys")) {
            return c.skip_value().map(|()| Flow::Next);
        }
        c.object(|c, table| {
            if !c.is_empty_container()? {
                tables.insert_str(table);
            }
            c.skip_value().map(|()| Flow::Next)
        })?;
        Some(Flow::Stop)
    });
    tables
}

/// Each `RequestItems` entry of a BatchWriteItem or BatchGetItem body: the table as
/// written (name or ARN) and its value's JSON as written. Empty when there is none.
pub fn request_items(body: &[u8]) -> Vec<(Cow<'_, str>, &[u8])> {
    let mut entries = Vec::new();
    let _ = top_level(&mut Cursor::new(body), "RequestItems", |c| {
        c.object(|c, table| {
            let value = c.raw_value()?;
            if let Some(table) = table.decode() {
                entries.push((table, value));
            }
            Some(Flow::Next)
        })
    });
    entries
}
