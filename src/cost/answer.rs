//! What an answer says a request cost, read as its body passes: an LLM answer's
//! `usage` (a whole JSON answer, or the events of a streamed one), DynamoDB's
//! `ConsumedCapacity`. The body is never held whole: a JSON answer keeps its first
//! and last [`KEEP`] bytes (where `usage` and `ConsumedCapacity` are), a stream the
//! first and last 64 KiB of one event line at a time.

use super::dynamodb::{self, TableCost};
use super::llm::{self, StreamUsage, Tokens, value_of};
use super::{Unit, thousandths};

/// The most of a JSON answer's start, and of its end, kept to find its cost.
pub const KEEP: usize = 64 * 1024;

/// Reads one answer's body for its cost.
#[derive(Debug)]
pub struct AnswerCost {
    unit: Unit,
    stream: Option<StreamUsage>,
    head: Vec<u8>,
    /// The last bytes past `head`, at most 2 × [`KEEP`] before trimming to `KEEP`.
    tail: Vec<u8>,
}

impl AnswerCost {
    /// A reader for an answer in a lane counting `unit`; `events`: the answer is a
    /// stream of server-sent events.
    pub fn new(unit: Unit, events: bool) -> AnswerCost {
        AnswerCost {
            unit,
            stream: (events && unit == Unit::Tokens).then(StreamUsage::default),
            head: Vec::new(),
            tail: Vec::new(),
        }
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if let Some(stream) = &mut self.stream {
            stream.feed(chunk);
            return;
        }
        let room = KEEP.saturating_sub(self.head.len());
        let (head, rest) = chunk.split_at(room.min(chunk.len()));
        self.head.extend_from_slice(head);
        self.tail.extend_from_slice(rest);
        if self.tail.len() > 2 * KEEP {
            self.tail.drain(..self.tail.len() - KEEP);
        }
    }

    /// The tokens the answer reported, if it did.
    pub fn tokens(&self) -> Option<Tokens> {
        if let Some(stream) = &self.stream {
            return stream.tokens();
        }
        [&self.tail[..], &self.head[..]]
            .into_iter()
            .find_map(|part| value_of(part, b"\"usage\"").and_then(llm::usage_value))
    }

    /// The capacity units the answer reported, by table (empty when it did not).
    pub fn capacity(&self) -> Vec<TableCost> {
        [&self.head[..], &self.tail[..]]
            .into_iter()
            .find_map(|part| {
                let found = dynamodb::consumed_value(value_of(part, b"\"ConsumedCapacity\"")?);
                (!found.is_empty()).then_some(found)
            })
            .unwrap_or_default()
    }

    /// What the answer says the request cost in thousandths of the unit, for the
    /// lane of `table` (or all tables); `None` when it does not say.
    pub fn cost(&self, table: Option<&str>) -> Option<u64> {
        match self.unit {
            Unit::Requests => None,
            Unit::Tokens => self.tokens().map(Tokens::total),
            Unit::Capacity => {
                let found = self.capacity();
                let units = match table {
                    Some(table) => found.iter().find(|c| c.table == table)?.units,
                    None if found.is_empty() => return None,
                    None => found.iter().map(|c| c.units).sum(),
                };
                Some(thousandths(units))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(unit: Unit, events: bool, chunks: &[&[u8]]) -> AnswerCost {
        let mut reader = AnswerCost::new(unit, events);
        for chunk in chunks {
            reader.feed(chunk);
        }
        reader
    }

    #[test]
    fn a_json_answers_usage_is_found_at_its_end_however_long_it_is() {
        let text = "x".repeat(300_000);
        let body = format!(
            r#"{{"choices":[{{"message":{{"content":"{text} \"usage\": {{\"prompt_tokens\": 1}}"}}}}],"usage":{{"prompt_tokens":120,"completion_tokens":30}}}}"#
        );
        let chunks: Vec<&[u8]> = body.as_bytes().chunks(7_000).collect();
        let reader = read(Unit::Tokens, false, &chunks);
        assert_eq!(reader.cost(None), Some(150));
        assert!(reader.head.len() + reader.tail.len() <= 3 * KEEP);
    }

    #[test]
    fn anthropics_usage_and_a_streams_last_events_are_read() {
        let whole = br#"{"id":"msg","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":2}}"#;
        assert_eq!(read(Unit::Tokens, false, &[whole]).cost(None), Some(17));
        let stream: &[&[u8]] = &[
            b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
            b"data: {\"choices\":[],\"usage\":{\"prompt_tok",
            b"ens\":40,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
        ];
        assert_eq!(read(Unit::Tokens, true, stream).cost(None), Some(42));
        assert_eq!(read(Unit::Tokens, true, &[b"data: {}\n"]).cost(None), None);
    }

    #[test]
    fn consumed_capacity_is_read_per_table() {
        let one = br#"{"ConsumedCapacity":{"TableName":"t","CapacityUnits":8.0}}"#;
        assert_eq!(
            read(Unit::Capacity, false, &[one]).cost(Some("t")),
            Some(8000)
        );
        let many = br#"{"UnprocessedItems":{},"ConsumedCapacity":[{"TableName":"a","CapacityUnits":2.5},{"TableName":"b","CapacityUnits":1.0}]}"#;
        let reader = read(Unit::Capacity, false, &[many]);
        assert_eq!(reader.cost(Some("a")), Some(2500));
        assert_eq!(reader.cost(None), Some(3500));
        assert_eq!(reader.cost(Some("c")), None);
        assert_eq!(read(Unit::Capacity, false, &[b"{}"]).cost(None), None);
    }
}
