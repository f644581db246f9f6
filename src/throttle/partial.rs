//! DynamoDB's partial throttles: a `BatchWriteItem` or `BatchGetItem` answered 200
//! with a non-empty `UnprocessedItems` / `UnprocessedKeys` map. The body streams to the
//! client untouched; this scanner looks at it on the way, chunk by chunk, so batch
//! answers of any size are seen without being held.

use http::HeaderMap;

/// Whether the request is a DynamoDB batch operation whose answer may be partial.
pub fn is_batch(request_headers: &HeaderMap) -> bool {
    request_headers
        .get(super::aws::X_AMZ_TARGET)
        .map(|v| v.as_bytes())
        .is_some_and(|t| t.ends_with(b".BatchWriteItem") || t.ends_with(b".BatchGetItem"))
}

const PREFIX: &[u8] = b"\"Unprocessed";
const ITEMS: &[u8] = b"Items\"";
const KEYS: &[u8] = b"Keys\"";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Matched this many bytes of `"Unprocessed`.
    Prefix(usize),
    /// Matched `"Unprocessed`; `I` or `K` decides which key follows.
    Which,
    /// Matched this many bytes of `Items"` or `Keys"`.
    Suffix(&'static [u8], usize),
    Colon,
    Brace,
    /// Inside the map: anything but `}` means it is not empty.
    Content,
    Found,
}

/// Finds a non-empty `"UnprocessedItems": {...}` or `"UnprocessedKeys": {...}` in a
/// JSON body fed in any chunks.
#[derive(Clone, Debug)]
pub struct UnprocessedScan {
    state: State,
}

impl Default for UnprocessedScan {
    fn default() -> Self {
        UnprocessedScan {
            state: State::Prefix(0),
        }
    }
}

impl UnprocessedScan {
    /// Feeds the next chunk; true once a non-empty map has been seen.
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        for &b in chunk {
            if self.state == State::Found {
                break;
            }
            self.state = self.step(b);
        }
        self.found()
    }

    /// Whether a non-empty map has been seen.
    pub fn found(&self) -> bool {
        self.state == State::Found
    }

    fn step(&self, b: u8) -> State {
        // The key has a quote only at its ends, so a mismatch restarts at 0, or at 1
        // when the byte is itself an opening quote.
        let restart = if b == b'"' {
            State::Prefix(1)
        } else {
            State::Prefix(0)
        };
        match self.state {
            State::Prefix(n) if PREFIX[n] == b => {
                if n + 1 == PREFIX.len() {
                    State::Which
                } else {
                    State::Prefix(n + 1)
                }
            }
            State::Which => match b {
                b'I' => State::Suffix(ITEMS, 1),
                b'K' => State::Suffix(KEYS, 1),
                _ => restart,
            },
            State::Suffix(word, n) if word[n] == b => {
                if n + 1 == word.len() {
                    State::Colon
                } else {
                    State::Suffix(word, n + 1)
                }
            }
            State::Colon | State::Brace | State::Content if b.is_ascii_whitespace() => self.state,
            State::Colon if b == b':' => State::Brace,
            State::Brace if b == b'{' => State::Content,
            State::Content if b == b'}' => State::Prefix(0),
            State::Content => State::Found,
            State::Found => State::Found,
            _ => restart,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&str]) -> bool {
        let mut s = UnprocessedScan::default();
        chunks.iter().any(|c| s.feed(c.as_bytes()))
    }

    #[test]
    fn non_empty_unprocessed_items_are_found() {
        assert!(scan(&[
            r#"{"UnprocessedItems":{"orders":[{"PutRequest":{"Item":{"pk":{"S":"1"}}}}]}}"#
        ]));
        assert!(scan(&[
            r#"{"Responses":{},"UnprocessedKeys": { "t": {"Keys":[]}}}"#
        ]));
    }

    #[test]
    fn empty_maps_and_other_bodies_are_not() {
        assert!(!scan(&[r#"{"UnprocessedItems":{}}"#]));
        assert!(!scan(&[
            r#"{"UnprocessedKeys": { } ,"Responses":{"t":[{"pk":{"S":"UnprocessedItems"}}]}}"#
        ]));
        assert!(!scan(&[r#"{"ConsumedCapacity":[]}"#, ""]));
        assert!(!scan(&[r#"{"Unprocessed":{"x":1}}"#]));
    }

    #[test]
    fn keys_split_across_chunks_are_found() {
        let body = r#"{"UnprocessedItems":{"orders":[]}}"#;
        for split in 1..body.len() {
            let (a, b) = body.split_at(split);
            assert!(scan(&[a, b]), "split at {split}");
        }
    }

    #[test]
    fn a_quote_right_before_the_key_does_not_hide_it() {
        assert!(scan(&[r#"{"x":"""UnprocessedItems":{"t":[1]}}"#]));
    }

    #[test]
    fn batch_targets_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-amz-target",
            "DynamoDB_20120810.BatchWriteItem".parse().unwrap(),
        );
        assert!(is_batch(&h));
        h.insert(
            "x-amz-target",
            "DynamoDB_20120810.BatchGetItem".parse().unwrap(),
        );
        assert!(is_batch(&h));
        h.insert("x-amz-target", "DynamoDB_20120810.PutItem".parse().unwrap());
        assert!(!is_batch(&h));
        assert!(!is_batch(&HeaderMap::new()));
    }
}
