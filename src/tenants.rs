//! Who a request waits as, in an upstream with `[upstream.fairness]`: its tenant
//! (named by a header's value, hashed where the header is a credential, or by the
//! client's address), the tenant's weight, and the request's priority class. Tenants
//! are bounded: the first `max_tenants` names (those `weights` lists first) are told
//! apart, later ones share the tenant `other`, as do requests without the header.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http::{HeaderMap, HeaderName};

use crate::config::{Caller, FairnessSettings};
use crate::fair::Ticket;
use crate::metrics::{ShardedCounter, ShardedFloatCounter, UpstreamMetrics};
use crate::route::{CREDENTIALS, hashed};

/// The tenant of callers not told apart.
pub const OTHER: &str = "other";

/// One tenant: its name, weight and counters.
pub struct Tenant {
    /// Its name: the header's value, `key:` and a hash for a credential, an address,
    /// or `other`.
    pub name: Box<str>,
    /// Its weight (1 unless `weights` names it).
    pub weight: u32,
    /// Requests dispatched.
    pub dispatches: ShardedCounter,
    /// What they were reserved at, in the lanes' unit.
    pub cost: ShardedFloatCounter,
    /// Time they waited for their slots.
    pub wait: ShardedFloatCounter,
    /// Requests shed from a lane's queue.
    pub sheds: ShardedCounter,
}

/// One lane's part of a tenant's requests.
#[derive(Default)]
pub struct TenantCount {
    dispatches: AtomicU64,
    /// Thousandths of the lane's unit.
    cost: AtomicU64,
    wait_ns: AtomicU64,
    sheds: AtomicU64,
}

/// What a [`TenantCount`] holds, read at once.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TenantFigures {
    /// Requests dispatched.
    pub dispatches: u64,
    /// What they were reserved at, in the lane's unit.
    pub cost: f64,
    /// Time they waited for their slots.
    pub wait: Duration,
    /// Requests shed.
    pub sheds: u64,
}

impl TenantCount {
    /// Counts a dispatch of `cost` thousandths that waited `wait`.
    pub fn dispatched(&self, cost: u64, wait: Duration) {
        self.dispatches.fetch_add(1, Ordering::Relaxed);
        self.cost.fetch_add(cost, Ordering::Relaxed);
        let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.wait_ns.fetch_add(wait, Ordering::Relaxed);
    }

    /// Counts a shed.
    pub fn shed(&self) {
        self.sheds.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    #[allow(clippy::cast_precision_loss, reason = "a sum of bounded costs")]
    pub fn figures(&self) -> TenantFigures {
        TenantFigures {
            dispatches: self.dispatches.load(Ordering::Relaxed),
            cost: self.cost.load(Ordering::Relaxed) as f64 / crate::cost::ONE as f64,
            wait: Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed)),
            sheds: self.sheds.load(Ordering::Relaxed),
        }
    }
}

/// An upstream's tenants.
pub struct Tenants {
    by: Caller,
    priority: Option<HeaderName>,
    /// Headers whose values name tenants only as a hash, beside the credentials.
    secret: Vec<HeaderName>,
    weights: HashMap<String, u32>,
    max: usize,
    per_tenant: usize,
    known: RwLock<Known>,
    metrics: Arc<UpstreamMetrics>,
}

#[derive(Default)]
struct Known {
    ids: HashMap<Box<str>, u16>,
    list: Vec<Arc<Tenant>>,
}

impl Tenants {
    /// The tenants `settings` describe, `other` and the weighted ones known from the
    /// start; `secret`: the upstream's `lanes.secret_headers`.
    pub fn new(
        settings: &FairnessSettings,
        secret: &[HeaderName],
        metrics: Arc<UpstreamMetrics>,
    ) -> Tenants {
        let tenants = Tenants {
            by: settings.by.clone(),
            priority: settings.priority.clone(),
            secret: secret.to_vec(),
            weights: settings.weights.iter().cloned().collect(),
            max: settings.max_tenants.min(usize::from(u16::MAX) - 1),
            per_tenant: settings.max_waiting,
            known: RwLock::new(Known::default()),
            metrics,
        };
        tenants.id(OTHER);
        for (name, _) in &settings.weights {
            tenants.id(name);
        }
        tenants
    }

    /// One lane's counts, a place for every tenant there can be.
    pub fn counts(&self) -> Box<[TenantCount]> {
        (0..=self.max).map(|_| TenantCount::default()).collect()
    }

    /// The most requests one tenant may have waiting in one lane.
    pub fn per_tenant(&self) -> usize {
        self.per_tenant
    }

    /// Whether tenants are told apart by the client's address.
    pub fn by_client_ip(&self) -> bool {
        self.by == Caller::ClientIp
    }

    /// The ticket of a request with `headers` from `peer`.
    pub fn ticket(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Ticket {
        let tenant = match &self.by {
            Caller::Header(name) => match headers.get(name) {
                Some(value) if self.is_secret(name) => self.id(&hashed(value.as_bytes())),
                Some(value) => match value.to_str() {
                    Ok(text) if !text.is_empty() => self.id(text),
                    _ => 0,
                },
                None => 0,
            },
            Caller::ClientIp => peer.map_or(0, |ip| self.id(&ip.to_string())),
        };
        let weight = self.get(tenant).map_or(1, |t| t.weight);
        Ticket {
            tenant,
            weight,
            class: self.class(headers),
        }
    }

    /// A request's priority class: its header's integer, within -128 to 127; 0
    /// without one.
    fn class(&self, headers: &HeaderMap) -> i8 {
        let Some(name) = &self.priority else {
            return 0;
        };
        let value = headers.get(name).and_then(|v| v.to_str().ok());
        let n = value
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(0);
        i8::try_from(n.clamp(i64::from(i8::MIN), i64::from(i8::MAX))).unwrap_or(0)
    }

    fn is_secret(&self, name: &HeaderName) -> bool {
        CREDENTIALS.contains(&name.as_str()) || self.secret.contains(name)
    }

    /// The index of tenant `name`, made if there is room, else `other`'s (0).
    fn id(&self, name: &str) -> u16 {
        if let Some(id) = self.read().ids.get(name) {
            return *id;
        }
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = known.ids.get(name) {
            return *id;
        }
        // `other` and `max` names.
        if known.list.len() > self.max {
            return 0;
        }
        let Ok(id) = u16::try_from(known.list.len()) else {
            return 0;
        };
        let m = &self.metrics;
        known.list.push(Arc::new(Tenant {
            name: name.into(),
            weight: self.weights.get(name).copied().unwrap_or(1),
            dispatches: m.tenant_dispatches.named(name),
            cost: m.tenant_cost.named(name),
            wait: m.tenant_wait.named(name),
            sheds: m.tenant_sheds.named(name),
        }));
        known.ids.insert(name.into(), id);
        id
    }

    /// Tenant `id`.
    pub fn get(&self, id: u16) -> Option<Arc<Tenant>> {
        self.read().list.get(usize::from(id)).cloned()
    }

    /// Every tenant, `other` first.
    pub fn all(&self) -> Vec<Arc<Tenant>> {
        self.read().list.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
