//! What a lane's name says, read once when the lane is made: a DynamoDB lane's table,
//! access kind and whether it is a hot key's, so that nothing parses a name back.

use super::Rule;
use super::dynamodb::Access;

/// A lane's name and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    name: Box<str>,
    /// A DynamoDB lane (`TABLE:access`, a hot key's `TABLE:access:key=…`): the length
    /// of the table's name, and the access kind.
    table: Option<(usize, Access)>,
    hot: bool,
}

impl Key {
    /// The key of lane `name` under `rule`: only the DynamoDB rule names lanes after
    /// tables.
    pub fn new(rule: &Rule, name: &str) -> Key {
        let table = (*rule == Rule::DynamoDb)
            .then(|| name.split_once(':'))
            .flatten()
            .and_then(|(table, rest)| {
                let access = rest.split(':').next()?;
                let access = [Access::Read, Access::Write]
                    .into_iter()
                    .find(|a| a.as_str() == access)?;
                Some((table.len(), access))
            });
        Key {
            hot: table.is_some() && name.contains(":key="),
            name: name.into(),
            table,
        }
    }

    /// The lane's name: `default`, `orders:write`, `/pkg.Service/Method`, ...
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A DynamoDB lane's table.
    pub fn table(&self) -> Option<&str> {
        self.table.map(|(len, _)| &self.name[..len])
    }

    /// A DynamoDB lane's access kind.
    pub fn access(&self) -> Option<Access> {
        self.table.map(|(_, access)| access)
    }

    /// Whether this is a hot partition key's lane.
    pub fn is_hot(&self) -> bool {
        self.hot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::{Part, hot_key_name, lane_name};

    #[test]
    fn a_dynamodb_lane_names_its_table_and_access_and_others_name_nothing() {
        let key = Key::new(&Rule::DynamoDb, &lane_name("orders", "write"));
        assert_eq!(
            (key.name(), key.table(), key.access(), key.is_hot()),
            ("orders:write", Some("orders"), Some(Access::Write), false)
        );
        let hot = Key::new(&Rule::DynamoDb, &hot_key_name("orders", "read", 0xabc));
        assert_eq!(
            (hot.table(), hot.access(), hot.is_hot()),
            (Some("orders"), Some(Access::Read), true)
        );
        for name in ["default", "overflow", "control"] {
            let key = Key::new(&Rule::DynamoDb, name);
            assert_eq!(
                (key.table(), key.access(), key.is_hot()),
                (None, None, false)
            );
        }
        // A generic rule's parts may hold colons; they name no table.
        let rule = Rule::Parts(vec![Part::Method]);
        let key = Key::new(&rule, "a:write:key=1");
        assert_eq!((key.table(), key.is_hot()), (None, false));
    }
}
