//! The lanes one request takes a slot in, what it is reserved at in each, and the
//! hot-key lane it may need.

use std::sync::Arc;

use bytes::Bytes;

use super::Lane;
use crate::cost::ONE;
use crate::fair::Ticket;
use crate::route;

/// The lanes one request takes a slot in, in order, and the key the upstream's named
/// bucket is learned by (`from_response`).
#[derive(Clone, Debug)]
pub struct Route {
    /// The first lane, which times the request.
    pub first: Arc<Lane>,
    /// Further lanes (a batch naming several tables, a hot key's lane).
    pub more: Vec<Arc<Lane>>,
    /// The request key, when the upstream may name its bucket.
    pub key: Option<Box<str>>,
    /// A single-item DynamoDB request's key, whose hot-key lane ([`Route::hot_lane`])
    /// it takes once a throttle named a hot partition.
    pub hot: Option<HotKey>,
    /// A DynamoDB batch, whose answer may be a partial throttle.
    pub batch: bool,
    /// What the request is reserved at in `first` (thousandths of its lanes' unit).
    pub cost: u64,
    /// What it is reserved at in each of `more`, where that differs (a batch's other
    /// tables); a lane past the end takes `cost`.
    pub more_costs: Vec<u64>,
    /// Whether the answer can say what the request cost ([`crate::cost::settles`]).
    pub settles: bool,
    /// Who it waits as, with `[upstream.fairness]`.
    pub who: Option<Ticket>,
}

/// Where a single-item DynamoDB request's partition key is: read and hashed only when
/// a hot-key lane is asked for, which nearly no request needs.
#[derive(Clone, Debug)]
pub struct HotKey {
    /// The request body, as held for replay.
    pub body: Bytes,
    /// `Key` or `Item`.
    pub field: &'static str,
}

impl Route {
    /// Only `lane`.
    pub fn one(lane: Arc<Lane>) -> Route {
        Route {
            first: lane,
            more: Vec::new(),
            key: None,
            hot: None,
            batch: false,
            cost: ONE,
            more_costs: Vec::new(),
            settles: false,
            who: None,
        }
    }

    /// What the request is reserved at in `more[i]`.
    pub fn cost_in_more(&self, i: usize) -> u64 {
        self.more_costs.get(i).copied().unwrap_or(self.cost)
    }

    /// The name of the hot-key lane the request would take: named only when asked,
    /// as nearly every request never needs it.
    pub fn hot_lane(&self) -> Option<String> {
        let hot = self.hot.as_ref()?;
        let key = route::dynamodb::partition_key_in(hot.field, &hot.body, None)?;
        let key_of = self.first.key();
        Some(route::hot_key_name(
            key_of.table()?,
            key_of.access()?.as_str(),
            key,
        ))
    }
}
