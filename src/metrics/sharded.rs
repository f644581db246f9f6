//! The metrics every request updates, kept in per-core shards: each thread adds to a
//! cache line of its own, and a scrape sums the shards. A plain Prometheus counter is
//! one atomic that every core writes, so at tens of thousands of requests a second
//! the cores pass its cache line back and forth on every update.
//!
//! The families mirror the Prometheus vectors they replace (`new`,
//! `with_label_values`, `remove`, [`Collector`]), so they print alike.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use prometheus::core::{Collector, Desc, Describer, Opts};
use prometheus::proto::{self, LabelPair, MetricFamily, MetricType};

use super::LATENCY_BUCKETS;

/// The most shards a metric has; threads beyond share them.
const MAX_SHARDS: usize = 16;

/// One shard, on cache lines of its own (two: the adjacent-line prefetcher pulls
/// lines in pairs).
#[repr(align(128))]
#[derive(Default)]
pub struct Padded<T>(T);

fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT
        .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_SHARDS)))
}

/// This thread's shard: threads take the next one as they first count, so a
/// runtime's worker threads, started together, get shards of their own.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Relaxed) % shard_count();
    }
    MINE.with(|mine| *mine)
}

/// What one shard of a metric holds, and how the shards read as one sample.
pub trait Cell: Default + Send + Sync + 'static {
    /// The Prometheus type.
    const TYPE: MetricType;
    /// Sets the summed shards on `metric`.
    fn read(sharded: &Sharded<Self>, metric: &mut proto::Metric);
}

/// A metric's handle: cheap to clone, all clones update the same shards.
pub struct Sharded<C>(Arc<[Padded<C>]>);

impl<C> Clone for Sharded<C> {
    fn clone(&self) -> Self {
        Sharded(Arc::clone(&self.0))
    }
}

impl<C: Cell> Sharded<C> {
    fn new() -> Self {
        Sharded((0..shard_count()).map(|_| Padded::default()).collect())
    }

    fn mine(&self) -> &C {
        // `shard()` is below `shard_count()`, the length; the modulo keeps the
        // compiler from checking it again.
        &self.0[shard() % self.0.len()].0
    }
}

/// A counter's shard.
#[derive(Default)]
pub struct CounterCell(AtomicU64);

/// A sharded integer counter (`IntCounter`).
pub type ShardedCounter = Sharded<CounterCell>;

impl ShardedCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.mine().0.fetch_add(n, Relaxed);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.0.load(Relaxed)).sum()
    }
}

impl Cell for CounterCell {
    const TYPE: MetricType = MetricType::COUNTER;

    fn read(sharded: &Sharded<Self>, metric: &mut proto::Metric) {
        let mut counter = proto::Counter::default();
        counter.set_value(sharded.get() as f64);
        metric.set_counter(counter);
    }
}

/// A float counter's shard: its total's bits.
#[derive(Default)]
pub struct FloatCell(AtomicU64);

impl FloatCell {
    fn add(&self, value: f64) {
        // Other threads touch this shard only when they share it, so this rarely loops.
        let _ = self.0.fetch_update(Relaxed, Relaxed, |bits| {
            Some((f64::from_bits(bits) + value).to_bits())
        });
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Relaxed))
    }
}

/// A sharded float counter (`Counter`), for seconds.
pub type ShardedFloatCounter = Sharded<FloatCell>;

impl ShardedFloatCounter {
    /// Adds `value`, which must not be negative.
    pub fn inc_by(&self, value: f64) {
        self.mine().add(value);
    }

    /// The total.
    pub fn get(&self) -> f64 {
        self.0.iter().map(|s| s.0.get()).sum()
    }
}

impl Cell for FloatCell {
    const TYPE: MetricType = MetricType::COUNTER;

    fn read(sharded: &Sharded<Self>, metric: &mut proto::Metric) {
        let mut counter = proto::Counter::default();
        counter.set_value(sharded.get());
        metric.set_counter(counter);
    }
}

/// A gauge's shard: what this thread added and took away.
#[derive(Default)]
pub struct GaugeCell(AtomicI64);

/// A sharded integer gauge (`IntGauge`) that is only raised and lowered.
pub type ShardedGauge = Sharded<GaugeCell>;

impl ShardedGauge {
    /// Adds one.
    pub fn inc(&self) {
        self.mine().0.fetch_add(1, Relaxed);
    }

    /// Takes one away (on any thread: only the sum means anything).
    pub fn dec(&self) {
        self.mine().0.fetch_sub(1, Relaxed);
    }

    /// The value.
    pub fn get(&self) -> i64 {
        self.0.iter().map(|s| s.0.0.load(Relaxed)).sum()
    }
}

impl Cell for GaugeCell {
    const TYPE: MetricType = MetricType::GAUGE;

    fn read(sharded: &Sharded<Self>, metric: &mut proto::Metric) {
        let mut gauge = proto::Gauge::default();
        gauge.set_value(sharded.get() as f64);
        metric.set_gauge(gauge);
    }
}

/// A latency histogram's shard: a count per bucket of [`LATENCY_BUCKETS`] and one
/// past the last, and the sum.
#[derive(Default)]
pub struct HistogramCell {
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum: FloatCell,
}

/// A sharded histogram with the latency buckets.
pub type ShardedHistogram = Sharded<HistogramCell>;

impl ShardedHistogram {
    /// Counts one value (seconds).
    pub fn observe(&self, value: f64) {
        let cell = self.mine();
        let bucket = LATENCY_BUCKETS.partition_point(|&bound| bound < value);
        cell.buckets[bucket].fetch_add(1, Relaxed);
        cell.sum.add(value);
    }
}

impl Cell for HistogramCell {
    const TYPE: MetricType = MetricType::HISTOGRAM;

    fn read(sharded: &Sharded<Self>, metric: &mut proto::Metric) {
        let mut counts = [0u64; LATENCY_BUCKETS.len() + 1];
        let mut sum = 0.0;
        for shard in sharded.0.iter() {
            for (count, bucket) in counts.iter_mut().zip(&shard.0.buckets) {
                *count += bucket.load(Relaxed);
            }
            sum += shard.0.sum.get();
        }
        // The count is the buckets' total, so `_count` always equals the `+Inf` bucket.
        let mut cumulative = 0;
        let buckets = LATENCY_BUCKETS
            .iter()
            .zip(counts)
            .map(|(&bound, count)| {
                cumulative += count;
                let mut bucket = proto::Bucket::default();
                bucket.set_upper_bound(bound);
                bucket.set_cumulative_count(cumulative);
                bucket
            })
            .collect();
        let mut histogram = proto::Histogram::default();
        histogram.set_bucket(buckets);
        histogram.set_sample_count(counts.iter().sum());
        histogram.set_sample_sum(sum);
        metric.set_histogram(histogram);
    }
}

/// A family of sharded metrics by label values, as a Prometheus vector.
pub struct ShardedVec<C> {
    desc: Arc<Desc>,
    children: Arc<RwLock<BTreeMap<Vec<String>, Sharded<C>>>>,
}

impl<C> Clone for ShardedVec<C> {
    fn clone(&self) -> Self {
        ShardedVec {
            desc: Arc::clone(&self.desc),
            children: Arc::clone(&self.children),
        }
    }
}

/// Sharded `IntCounterVec`.
pub type ShardedCounterVec = ShardedVec<CounterCell>;
/// Sharded `CounterVec`.
pub type ShardedFloatCounterVec = ShardedVec<FloatCell>;
/// Sharded `IntGaugeVec`.
pub type ShardedGaugeVec = ShardedVec<GaugeCell>;
/// Sharded `HistogramVec` with the latency buckets.
pub type ShardedHistogramVec = ShardedVec<HistogramCell>;

impl<C: Cell> ShardedVec<C> {
    /// A family named and described by `opts`, with these label names.
    pub fn new(opts: Opts, labels: &[&str]) -> Result<Self, prometheus::Error> {
        let opts = opts.variable_labels(labels.iter().map(|l| l.to_string()).collect());
        Ok(ShardedVec {
            desc: Arc::new(opts.describe()?),
            children: Arc::default(),
        })
    }

    /// The metric with these label values, made if new.
    pub fn with_label_values(&self, values: &[&str]) -> Sharded<C> {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        if let Some(found) = self.read().get(&key) {
            return found.clone();
        }
        self.children
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_insert_with(Sharded::new)
            .clone()
    }

    /// Withdraws the metric with these label values.
    pub fn remove_label_values(&self, values: &[&str]) -> Result<(), prometheus::Error> {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.take(&key)
    }

    /// Withdraws the metric with these labels.
    pub fn remove(&self, labels: &HashMap<&str, &str>) -> Result<(), prometheus::Error> {
        let key = self
            .desc
            .variable_labels
            .iter()
            .map(|name| labels.get(name.as_str()).map(|v| v.to_string()))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| prometheus::Error::Msg(format!("labels {labels:?} do not match")))?;
        self.take(&key)
    }

    fn take(&self, key: &[String]) -> Result<(), prometheus::Error> {
        let mut children = self
            .children
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        children
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| prometheus::Error::Msg(format!("no metric with labels {key:?}")))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<String>, Sharded<C>>> {
        self.children.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<C: Cell> Collector for ShardedVec<C> {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let names = &self.desc.variable_labels;
        let metrics = self
            .read()
            .iter()
            .map(|(values, sharded)| {
                let mut labels: Vec<LabelPair> = names
                    .iter()
                    .zip(values)
                    .map(|(name, value)| {
                        let mut pair = LabelPair::default();
                        pair.set_name(name.clone());
                        pair.set_value(value.clone());
                        pair
                    })
                    .collect();
                labels.extend(self.desc.const_label_pairs.iter().cloned());
                labels.sort();
                let mut metric = proto::Metric::from_label(labels);
                C::read(sharded, &mut metric);
                metric
            })
            .collect();
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(C::TYPE);
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, HistogramOpts, HistogramVec, IntCounterVec, Registry, TextEncoder};

    fn text(collector: impl Collector + 'static) -> String {
        let registry = Registry::new();
        registry.register(Box::new(collector)).unwrap();
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn counters_print_as_prometheus_counters_do() {
        let opts = || Opts::new("t_total", "help");
        let ours = ShardedCounterVec::new(opts(), &["upstream", "outcome"]).unwrap();
        let theirs = IntCounterVec::new(opts(), &["upstream", "outcome"]).unwrap();
        for (labels, n) in [(["b", "x"], 3), (["a", "y"], 0), (["a", "x"], 7)] {
            ours.with_label_values(&labels).inc_by(n);
            theirs.with_label_values(&labels).inc_by(n);
        }
        assert_eq!(text(ours.clone()), text(theirs.clone()));
        ours.remove(&HashMap::from([("upstream", "b"), ("outcome", "x")]))
            .unwrap();
        theirs
            .remove(&HashMap::from([("upstream", "b"), ("outcome", "x")]))
            .unwrap();
        assert_eq!(text(ours.clone()), text(theirs));
        assert!(ours.remove_label_values(&["b", "x"]).is_err());
    }

    #[test]
    fn float_counters_print_as_prometheus_counters_do() {
        let opts = || Opts::new("t_seconds_total", "help");
        let ours = ShardedFloatCounterVec::new(opts(), &["upstream"]).unwrap();
        let theirs = prometheus::CounterVec::new(opts(), &["upstream"]).unwrap();
        for value in [0.25, 1.5, 0.0, 0.125] {
            ours.with_label_values(&["a"]).inc_by(value);
            theirs.with_label_values(&["a"]).inc_by(value);
        }
        assert_eq!(text(ours.clone()), text(theirs));
        assert_eq!(ours.with_label_values(&["a"]).get(), 1.875);
    }

    #[test]
    fn histograms_print_as_prometheus_histograms_do() {
        let ours = ShardedHistogramVec::new(Opts::new("t_seconds", "help"), &["upstream"]).unwrap();
        let opts = HistogramOpts::new("t_seconds", "help").buckets(LATENCY_BUCKETS.to_vec());
        let theirs = HistogramVec::new(opts, &["upstream"]).unwrap();
        // Below the first bound, on bounds, between them and past the last.
        for value in [0.0, 0.0001, 0.0005, 0.003, 0.1, 0.75, 60.0, 61.0, 1e9] {
            ours.with_label_values(&["a"]).observe(value);
            theirs.with_label_values(&["a"]).observe(value);
        }
        assert_eq!(text(ours), text(theirs));
    }

    #[test]
    fn shards_written_from_many_threads_sum_up() {
        let counter = ShardedCounterVec::new(Opts::new("c", "h"), &[])
            .unwrap()
            .with_label_values(&[]);
        let gauge = ShardedGaugeVec::new(Opts::new("g", "h"), &[])
            .unwrap()
            .with_label_values(&[]);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        counter.inc();
                        gauge.inc();
                    }
                });
                // Lowered on another thread than it was raised, as a moved future does.
                s.spawn(|| {
                    for _ in 0..500 {
                        gauge.dec();
                    }
                });
            }
        });
        assert_eq!(counter.get(), 8000);
        assert_eq!(gauge.get(), 4000);
    }
}
