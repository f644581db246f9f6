//! Which lane a request belongs to, and which lanes an answer speaks about: pure
//! functions of request and response parts, with no state and no I/O. The lanes
//! themselves (their pacers and controllers) live in [`crate::lane`].
//!
//! A lane is named by what sets it apart: `orders:write` (a DynamoDB table and access
//! kind), `/pkg.Service/Method` (a gRPC method), `GET|acme` (a generic rule's parts
//! joined by `|`). A request whose lane cannot be told goes to `default`.

pub mod dynamodb;
mod json;
mod key;

pub use key::Key;

pub use json::FieldScan;

use std::borrow::Cow;
use std::fmt;

use arrayvec::ArrayString;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::throttle::{Preset, X_AMZ_TARGET};

/// The lane every upstream has, and where a request goes when no rule places it.
pub const DEFAULT: &str = "default";
/// Where new lanes go once an upstream has `max_lanes`.
pub const OVERFLOW: &str = "overflow";
/// DynamoDB's control-plane operations (CreateTable, DescribeTable, ...) share it.
pub const CONTROL: &str = "control";
/// The longest lane name kept; longer keys are cut (a header can be 8 KiB).
const MAX_NAME: usize = 128;

/// One part of a generic lane key (`[upstream.lanes] by`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// The HTTP method.
    Method,
    /// A request header's value (empty when absent).
    Header(HeaderName),
    /// A request header whose value is a secret (a credential, or a header
    /// `secret_headers` names): the lane is named by [`hashed`] of it, so the value
    /// reaches no metric label, `/status`, log line or Redis key.
    Secret(HeaderName),
    /// The first N segments of the path (`path:1` of `/pkg.Service/Method` is the gRPC
    /// service).
    Path(usize),
    /// A top-level string field of a JSON request body (`body:model`), as far as the
    /// body is held (empty when absent or past it).
    Body(Box<str>),
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Method => f.write_str("method"),
            Part::Header(name) | Part::Secret(name) => write!(f, "header:{name}"),
            Part::Path(n) => write!(f, "path:{n}"),
            Part::Body(field) => write!(f, "body:{field}"),
        }
    }
}

/// The headers that carry credentials: a lane they name is named by a hash of the
/// value ([`Part::Secret`]), whatever the config says.
pub const CREDENTIALS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
];

/// `method`, `header:NAME`, `path:N` (N from 1 to 16), `body:FIELD` or `service` (a
/// gRPC service: `path:1`). A header in [`CREDENTIALS`] is a [`Part::Secret`].
pub fn parse_part(text: &str) -> Result<Part, String> {
    let bad = || {
        format!(
            "must be \"method\", \"header:NAME\", \"path:N\" (N from 1 to 16), \"body:FIELD\" or \"service\", got \"{text}\""
        )
    };
    match text {
        "method" => return Ok(Part::Method),
        "service" => return Ok(Part::Path(1)),
        _ => {}
    }
    if let Some(name) = text.strip_prefix("header:") {
        return HeaderName::from_bytes(name.as_bytes())
            .map(|name| {
                if CREDENTIALS.contains(&name.as_str()) {
                    Part::Secret(name)
                } else {
                    Part::Header(name)
                }
            })
            .map_err(|_| bad());
    }
    if let Some(field) = text.strip_prefix("body:") {
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        return match field.len() {
            1..=64 if field.chars().all(plain) => Ok(Part::Body(field.into())),
            _ => Err(bad()),
        };
    }
    if let Some(n) = text.strip_prefix("path:") {
        return match n.parse::<usize>() {
            Ok(n @ 1..=16) => Ok(Part::Path(n)),
            _ => Err(bad()),
        };
    }
    Err(bad())
}

/// How an upstream's requests are split into lanes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// One lane, `default`: nothing is looked at.
    Single,
    /// DynamoDB: table × read|write, `control` for the control plane.
    DynamoDb,
    /// The key made of these parts.
    Parts(Vec<Part>),
}

impl Rule {
    /// The rule in force: `by` when set (empty: one lane), else the preset's (a
    /// DynamoDB table, a gRPC method, an LLM API's model); with
    /// `from_response` and no `by`, requests are told apart by their first path segment
    /// until the upstream names their bucket.
    pub fn of(preset: Preset, by: Option<&[Part]>, from_response: bool) -> Rule {
        match by {
            Some([]) => Rule::Single,
            Some(parts) => Rule::Parts(parts.to_vec()),
            None if preset == Preset::DynamoDb => Rule::DynamoDb,
            None if preset == Preset::Grpc => Rule::Parts(vec![Part::Path(2)]),
            // Both limit each model on its own, and name it only in the body.
            None if matches!(preset, Preset::OpenAi | Preset::Anthropic) => {
                Rule::Parts(vec![Part::Body("model".into())])
            }
            None if from_response => Rule::Parts(vec![Part::Path(1)]),
            None => Rule::Single,
        }
    }

    /// A scan for the body fields the rule names (`body:FIELD`), to read a body on
    /// past what is held until they have passed, holding at most `most` bytes; `None`
    /// when it names none (or `most` is 0).
    pub fn scan(&self, most: u64) -> Option<BodyScan<'_>> {
        let Rule::Parts(parts) = self else {
            return None;
        };
        let fields = FieldScan::new(parts)?;
        (most > 0).then_some(BodyScan { fields, most })
    }

    /// Whether the rule reads the request body.
    pub fn reads_body(&self) -> bool {
        match self {
            Rule::DynamoDb => true,
            Rule::Parts(parts) => parts.iter().any(|p| matches!(p, Part::Body(_))),
            Rule::Single => false,
        }
    }
}

/// How far a body is read on to find the fields that name its lane.
#[derive(Debug)]
pub struct BodyScan<'a> {
    /// What has passed of the fields.
    pub fields: FieldScan<'a>,
    /// The most of the body held while looking.
    pub most: u64,
}

/// The lanes a request takes a slot in, sorted and without repeats (so two requests
/// that share lanes take them in the same order and cannot hold each other up).
/// A table's name is borrowed from the request body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys<'a> {
    names: Names<'a>,
    /// A single-item DynamoDB request's body field that holds its key (see
    /// [`dynamodb::item_field`]): its hot-key lane is [`hot_key_name`] of its lane
    /// and that key's hash, worked out only when needed.
    item: Option<&'static str>,
    /// A DynamoDB batch, whose answer may be a partial throttle.
    batch: bool,
}

/// The longest name [`Keys`] gives: a cut table name and its access kind.
const NAME_ROOM: usize = MAX_NAME + ":control".len();

/// Room for a lane name on the stack, so that routing a request allocates nothing.
pub type Name = ArrayString<NAME_ROOM>;

// One lane is the common case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Names<'a> {
    #[default]
    None,
    /// `TABLE:ACCESS`.
    Table(Cow<'a, str>, &'static str),
    One(Name),
    Many(Vec<String>),
}

impl Keys<'_> {
    /// The first lane's name (spelled out in `room`) and the others', sorted; `None`
    /// for `default`.
    pub fn split_first<'s>(&'s self, room: &'s mut Name) -> Option<(&'s str, &'s [String])> {
        match &self.names {
            Names::None => None,
            Names::Table(table, access) => {
                spell(room, &[cut(table), ":", access], NAME_ROOM);
                Some((room.as_str(), &[]))
            }
            Names::One(name) => Some((name.as_str(), &[])),
            Names::Many(names) => names
                .split_first()
                .map(|(first, rest)| (first.as_str(), rest)),
        }
    }

    /// The lane names, sorted.
    #[cfg(test)]
    fn names(&self) -> Vec<String> {
        let mut room = Name::new();
        self.split_first(&mut room)
            .map(|(first, rest)| {
                std::iter::once(first.to_string())
                    .chain(rest.iter().cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// No lane told: `default`.
    pub fn is_default(&self) -> bool {
        self.names == Names::None
    }

    /// The body field of a single-item DynamoDB request that holds its key.
    pub fn item_field(&self) -> Option<&'static str> {
        self.item
    }

    /// Whether the request is a DynamoDB batch (BatchWriteItem, BatchGetItem).
    pub fn is_batch(&self) -> bool {
        self.batch
    }

    fn one(name: Name) -> Self {
        Keys {
            names: Names::One(name),
            ..Keys::default()
        }
    }

    fn many(mut names: Vec<String>) -> Self {
        names.sort_unstable();
        names.dedup();
        match names.as_slice() {
            [] => Keys::default(),
            [name] => Keys::one(name_of(&[name], NAME_ROOM)),
            _ => Keys {
                names: Names::Many(names),
                ..Keys::default()
            },
        }
    }
}

/// The lanes `rule` puts a request in; `body` is what easeoff holds of its body, if
/// anything. Never fails: what cannot be told goes to `default` (no names).
pub fn keys<'a>(rule: &Rule, head: &Parts, body: Option<&'a [u8]>) -> Keys<'a> {
    match rule {
        Rule::Single => Keys::default(),
        Rule::DynamoDb => dynamodb_keys(&head.headers, body),
        Rule::Parts(parts) => {
            let name = joined(parts, head, body);
            // Nothing to tell it by (one part, absent): `default`.
            if name.is_empty() {
                Keys::default()
            } else {
                Keys::one(name)
            }
        }
    }
}

fn dynamodb_keys<'a>(headers: &HeaderMap, body: Option<&'a [u8]>) -> Keys<'a> {
    let target = headers.get(X_AMZ_TARGET).map(HeaderValue::as_bytes);
    let Some((operation, access)) = target.and_then(dynamodb::operation_in) else {
        return Keys::default();
    };
    if access == dynamodb::Access::Control {
        return Keys::one(name_of(&[CONTROL], NAME_ROOM));
    }
    let batch = matches!(operation, "BatchWriteItem" | "BatchGetItem");
    let suffix = access.as_str();
    let tables = body.map(|body| dynamodb::tables(operation, body));
    let names = match tables.map(dynamodb::Tables::into_names) {
        None | Some(dynamodb::Names::None) => Names::None,
        Some(dynamodb::Names::One(table)) => Names::Table(table, suffix),
        Some(dynamodb::Names::Many(many)) => {
            return Keys {
                batch,
                ..Keys::many(many.iter().map(|table| lane_name(table, suffix)).collect())
            };
        }
    };
    Keys {
        item: dynamodb::item_field(operation).filter(|_| matches!(names, Names::Table(..))),
        names,
        batch,
    }
}

/// `TABLE:read` or `TABLE:write`.
pub fn lane_name(table: &str, suffix: &str) -> String {
    let mut name = String::with_capacity(table.len() + suffix.len() + 1);
    name.push_str(cut(table));
    name.push(':');
    name.push_str(suffix);
    name
}

/// The hot-key lane of a table's writes (or reads) to one partition key.
pub fn hot_key_name(table: &str, suffix: &str, key: u64) -> String {
    format!("{}:key={key:016x}", lane_name(table, suffix))
}

fn joined(parts: &[Part], head: &Parts, body: Option<&[u8]>) -> Name {
    let mut name = Name::new();
    for (i, part) in parts.iter().enumerate() {
        let whole = match part {
            Part::Method => push_cut(&mut name, head.method.as_str(), MAX_NAME),
            Part::Header(header) => {
                let value = head.headers.get(header).map(|v| v.as_bytes());
                let value = String::from_utf8_lossy(value.unwrap_or(b""));
                push_cut(&mut name, &value, MAX_NAME)
            }
            Part::Secret(header) => {
                let value = head.headers.get(header).map_or(&b""[..], |v| v.as_bytes());
                let hashed = (!value.is_empty()).then(|| hashed(value));
                push_cut(&mut name, hashed.as_deref().unwrap_or(""), MAX_NAME)
            }
            Part::Path(n) => push_cut(&mut name, path_prefix(head.uri.path(), *n), MAX_NAME),
            Part::Body(field) => {
                let value = body.and_then(|b| json::top_level_string(b, field));
                push_cut(&mut name, value.as_deref().unwrap_or(""), MAX_NAME)
            }
        };
        if !whole || (i + 1 < parts.len() && !push_cut(&mut name, "|", MAX_NAME)) {
            break;
        }
    }
    name
}

/// How a secret names a lane: `key:` and the first 12 hex digits of its SHA-256. Not
/// keyed, so every member of a fleet names the lane alike; 48 bits hide a credential
/// (an API key's entropy is far above that) but not a value that can be guessed.
pub fn hashed(secret: &[u8]) -> ArrayString<16> {
    use sha2::Digest;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = sha2::Sha256::digest(secret);
    let mut name = ArrayString::new();
    // Never fails: "key:" and 12 digits are the 16 bytes of room.
    let _ = name.try_push_str("key:");
    for byte in &digest[..6] {
        let _ = name.try_push(char::from(HEX[usize::from(byte >> 4)]));
        let _ = name.try_push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    name
}

/// `parts` joined, cut at `limit` bytes.
fn name_of(parts: &[&str], limit: usize) -> Name {
    let mut name = Name::new();
    spell(&mut name, parts, limit);
    name
}

/// Spells `parts` joined into `room` (emptied first), cut at `limit` bytes; in
/// place, as a `Name` is too large to copy around freely.
fn spell(room: &mut Name, parts: &[&str], limit: usize) {
    room.clear();
    for part in parts {
        if !push_cut(room, part, limit) {
            break;
        }
    }
}

/// Appends as much of `text` as fits in `limit` bytes, cut at a character boundary;
/// whether all of it did.
fn push_cut(name: &mut Name, text: &str, limit: usize) -> bool {
    let room = limit.saturating_sub(name.len());
    let part = cut_to(text, room);
    // Never fails: `limit` is at most the capacity.
    let _ = name.try_push_str(part);
    part.len() == text.len()
}

/// The first `n` segments of `path`, with their leading slashes.
pub fn path_prefix(path: &str, n: usize) -> &str {
    let mut seen = 0;
    for (i, b) in path.bytes().enumerate() {
        if b == b'/' && i > 0 {
            seen += 1;
            if seen == n {
                return &path[..i];
            }
        }
    }
    path
}

/// At most `MAX_NAME` bytes, cut at a character boundary.
fn cut(text: &str) -> &str {
    cut_to(text, MAX_NAME)
}

/// At most `max` bytes, cut at a character boundary.
fn cut_to(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The bucket an answer names in `header` (GitHub's `x-ratelimit-resource`), cut to a
/// lane name's length.
pub fn named_bucket<'a>(headers: &'a HeaderMap, header: &HeaderName) -> Option<&'a str> {
    let value = headers.get(header)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| cut(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn head(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn parts_parse_and_print_back() {
        for text in ["method", "header:x-tenant", "path:2", "body:model"] {
            assert_eq!(parse_part(text).unwrap().to_string(), text);
        }
        assert_eq!(parse_part("service"), Ok(Part::Path(1)));
        for bad in [
            "path:0",
            "path:17",
            "path:x",
            "header:",
            "header:a b",
            "body:",
            "body:a b",
            "body:a\"",
            "query",
            "",
        ] {
            assert!(parse_part(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_rule_follows_by_then_the_preset() {
        assert_eq!(Rule::of(Preset::DynamoDb, None, false), Rule::DynamoDb);
        assert_eq!(Rule::of(Preset::DynamoDb, Some(&[]), false), Rule::Single);
        assert_eq!(
            Rule::of(Preset::Grpc, None, false),
            Rule::Parts(vec![Part::Path(2)])
        );
        assert_eq!(Rule::of(Preset::None, None, false), Rule::Single);
        assert_eq!(
            Rule::of(Preset::None, None, true),
            Rule::Parts(vec![Part::Path(1)])
        );
        let by = [Part::Method];
        assert_eq!(
            Rule::of(Preset::Grpc, Some(&by), false),
            Rule::Parts(vec![Part::Method])
        );
    }

    #[test]
    fn a_body_field_names_the_lane_as_far_as_the_body_is_held() {
        let rule = Rule::of(Preset::OpenAi, None, false);
        assert_eq!(rule, Rule::Parts(vec![Part::Body("model".into())]));
        assert!(rule.reads_body());
        let h = head("POST", "/v1/chat/completions", &[]);
        let lane = |body: &[u8]| keys(&rule, &h, Some(body)).names();
        let chat =
            br#"{"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o","stream":true}"#;
        assert_eq!(lane(chat), ["gpt-4o"]);
        assert_eq!(lane(br#"{"model":"claude-\u0033"}"#), ["claude-3"]);
        // Absent, not a string, not JSON, or cut off before it: `default`.
        for other in [
            &br#"{"messages":[]}"#[..],
            br#"{"model":7}"#,
            b"model",
            br#"{"messages":[{"#,
        ] {
            assert!(keys(&rule, &h, Some(other)).is_default(), "{other:?}");
        }
        assert!(keys(&rule, &h, None).is_default());
        assert!(!Rule::Parts(vec![Part::Method]).reads_body());
    }

    /// Where a scan for `rule`'s body fields ends in `body` fed `chunk` bytes at a
    /// time: the index of the last byte it needed, or `None` if it never ended.
    fn scan_end(rule: &Rule, body: &[u8], chunk: usize) -> Option<usize> {
        let mut scan = rule.scan(1).unwrap().fields;
        let mut fed = 0;
        for piece in body.chunks(chunk) {
            if scan.feed(piece) {
                // Find the byte within the piece: feed it again one byte at a time.
                let mut again = rule.scan(1).unwrap().fields;
                for (i, b) in body.iter().enumerate() {
                    if again.feed(std::slice::from_ref(b)) {
                        assert!(i < fed + piece.len());
                        return Some(i);
                    }
                }
            }
            fed += piece.len();
        }
        None
    }

    #[test]
    fn a_scan_ends_once_the_body_fields_have_passed_wherever_they_are() {
        let rule = Rule::of(Preset::OpenAi, None, false);
        let h = head("POST", "/v1/chat/completions", &[]);
        let prompt = "p\\\" \\u0022model\\\":\\\"no\\\"".repeat(50);
        for body in [
            // openai-python's order, and anthropic-python's.
            format!(
                r#"{{"messages":[{{"role":"user","content":"{prompt}","model":"no"}}],"model":"gpt-4o","stream":true}}"#
            ),
            format!(
                r#"{{"max_tokens":10, "messages" : [{{"content":"{prompt}"}}], "model" : "gpt-4o" }}"#
            ),
            format!(
                r#"{{"input":{{"a":[1,{{"b":"]}}"}}]}},"mod\u0065l":"gpt-4o","x":[{prompt:?}]}}"#
            ),
        ] {
            let bytes = body.as_bytes();
            let end = scan_end(&rule, bytes, 1).unwrap();
            // Just past the field's value: what is held then names the lane.
            assert!(matches!(bytes[end], b',' | b'}'), "{body}");
            assert_eq!(keys(&rule, &h, Some(&bytes[..=end])).names(), ["gpt-4o"]);
            for chunk in [7, 4096, bytes.len()] {
                assert_eq!(scan_end(&rule, bytes, chunk), Some(end), "{chunk}");
            }
        }
        // No such field: the object's end; no object: at once.
        let absent = br#"{"messages":[{"model":"x"}], "n": 1}"#;
        assert_eq!(scan_end(&rule, absent, 3), Some(absent.len() - 1));
        assert_eq!(scan_end(&rule, b"--boundary\r\n", 4), Some(0));
        assert_eq!(scan_end(&rule, br#"{"messages":[1,2"#, 4), None);
        // Every body part, in any order; none without one, or with 0 bytes to hold.
        let two = Rule::Parts(vec![
            Part::Body("a".into()),
            Part::Method,
            Part::Body("b".into()),
        ]);
        let body = br#"{"b":1,"c":{"a":2},"a":"x","d":3}"#;
        assert_eq!(scan_end(&two, body, 5), Some(body.len() - 7));
        assert!(Rule::Parts(vec![Part::Method]).scan(1 << 20).is_none());
        assert!(rule.scan(0).is_none());
    }

    #[test]
    fn generic_keys_join_their_parts() {
        let rule = Rule::Parts(vec![
            Part::Method,
            Part::Header(HeaderName::from_static("x-tenant")),
            Part::Path(2),
        ]);
        let h = head("POST", "/v1/items/42?x=1", &[("x-tenant", "acme")]);
        assert_eq!(keys(&rule, &h, None).names(), ["POST|acme|/v1/items"]);
        let h = head("GET", "/", &[]);
        assert_eq!(keys(&rule, &h, None).names(), ["GET||/"]);
    }

    #[test]
    fn a_credential_header_names_its_lane_by_a_hash_of_its_value() {
        // The first 12 hex digits of SHA-256("Bearer sk-live-123"), as `sha256sum` gives.
        let rule = Rule::Parts(vec![
            parse_part("header:authorization").unwrap(),
            Part::Method,
        ]);
        let h = head("POST", "/", &[("authorization", "Bearer sk-live-123")]);
        assert_eq!(keys(&rule, &h, None).names(), ["key:af7d75077050|POST"]);
        for header in [
            "authorization",
            "proxy-authorization",
            "cookie",
            "x-api-key",
            "api-key",
        ] {
            let rule = Rule::Parts(vec![parse_part(&format!("header:{header}")).unwrap()]);
            let h = head("GET", "/", &[(header, "sk-ant-1")]);
            assert_eq!(
                keys(&rule, &h, None).names(),
                ["key:1a0712036efd"],
                "{header}"
            );
            // Absent: no lane of its own, as for any header.
            assert!(keys(&rule, &head("GET", "/", &[]), None).is_default());
        }
    }

    #[test]
    fn a_grpc_method_is_its_path() {
        let rule = Rule::of(Preset::Grpc, None, false);
        let h = head("POST", "/pkg.Service/Method", &[]);
        assert_eq!(keys(&rule, &h, None).names(), ["/pkg.Service/Method"]);
        let service = Rule::Parts(vec![Part::Path(1)]);
        assert_eq!(keys(&service, &h, None).names(), ["/pkg.Service"]);
    }

    #[test]
    fn long_keys_are_cut_at_a_character_boundary() {
        let rule = Rule::Parts(vec![Part::Header(HeaderName::from_static("x-t"))]);
        let long = "é".repeat(200);
        let h = head("GET", "/", &[("x-t", &long)]);
        let keys = keys(&rule, &h, None);
        assert!(keys.names()[0].len() <= MAX_NAME);
        assert!(keys.names()[0].chars().all(|c| c == 'é'));
    }

    #[test]
    fn path_prefixes() {
        assert_eq!(path_prefix("/a/b/c", 1), "/a");
        assert_eq!(path_prefix("/a/b/c", 2), "/a/b");
        assert_eq!(path_prefix("/a/b/c", 5), "/a/b/c");
        assert_eq!(path_prefix("/", 1), "/");
    }

    #[test]
    fn dynamodb_keys_name_table_and_access() {
        let write = head(
            "POST",
            "/",
            &[("x-amz-target", "DynamoDB_20120810.PutItem")],
        );
        let body = br#"{"TableName":"orders","Item":{"pk":{"S":"1"}}}"#;
        assert_eq!(
            keys(&Rule::DynamoDb, &write, Some(body)).names(),
            ["orders:write"]
        );
        assert!(keys(&Rule::DynamoDb, &write, None).is_default());
        assert!(keys(&Rule::DynamoDb, &write, Some(b"not json")).is_default());
        let read = head("POST", "/", &[("x-amz-target", "DynamoDB_20120810.Query")]);
        assert_eq!(
            keys(&Rule::DynamoDb, &read, Some(br#"{"TableName":"orders"}"#)).names(),
            ["orders:read"]
        );
        let control = head(
            "POST",
            "/",
            &[("x-amz-target", "DynamoDB_20120810.DescribeTable")],
        );
        assert_eq!(
            keys(&Rule::DynamoDb, &control, Some(b"{}")).names(),
            [CONTROL]
        );
        let batch = head(
            "POST",
            "/",
            &[("x-amz-target", "DynamoDB_20120810.BatchWriteItem")],
        );
        let body = br#"{"RequestItems":{"b":[],"a":[]}}"#;
        assert_eq!(
            keys(&Rule::DynamoDb, &batch, Some(body)).names(),
            ["a:write", "b:write"]
        );
        assert!(keys(&Rule::DynamoDb, &head("POST", "/", &[]), Some(body)).is_default());
        assert!(keys(&Rule::DynamoDb, &batch, Some(body)).is_batch());
        assert!(!keys(&Rule::DynamoDb, &write, None).is_batch());
    }

    #[test]
    fn a_long_table_name_is_cut_before_its_access() {
        let write = head(
            "POST",
            "/",
            &[("x-amz-target", "DynamoDB_20120810.PutItem")],
        );
        let table = "t".repeat(300);
        let body = format!(r#"{{"TableName":"{table}","Item":{{}}}}"#);
        let keys = keys(&Rule::DynamoDb, &write, Some(body.as_bytes()));
        assert_eq!(keys.names(), [format!("{}:write", &table[..MAX_NAME])]);
        assert_eq!(keys.item_field(), Some("Item"));
    }

    #[test]
    fn a_part_cut_short_ends_the_name() {
        let rule = Rule::Parts(vec![
            Part::Header(HeaderName::from_static("x-t")),
            Part::Method,
        ]);
        let long = "a".repeat(MAX_NAME + 1);
        let h = head("GET", "/", &[("x-t", &long)]);
        assert_eq!(keys(&rule, &h, None).names(), [&long[..MAX_NAME]]);
        let fits = "a".repeat(MAX_NAME - 1);
        let h = head("GET", "/", &[("x-t", &fits)]);
        assert_eq!(keys(&rule, &h, None).names(), [format!("{fits}|")]);
    }
}
