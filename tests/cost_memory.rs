//! Costing a DynamoDB request reads its body without building a JSON tree of it: a
//! 16 MiB batch or transaction costs a few allocations per table, not its size
//! (issue 49, item 6). Measured with an allocator that counts what this thread asks
//! for, so the other tests of this binary cannot disturb it.

#![allow(
    unsafe_code,
    reason = "a counting global allocator, which only delegates"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use easeoff::cost::dynamodb;

/// The system allocator, counting the bytes each thread allocates.
struct Counting;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed unchanged to the system allocator; the count is a
// const-initialized thread local, which allocates nothing itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.with(|n| n.set(n.get() + layout.size() as u64));
        // SAFETY: the caller's contract for `layout` is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, so from the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.with(|n| n.set(n.get() + new_size as u64));
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes this thread allocated while `f` ran, and what `f` gave.
fn allocated<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATED.with(Cell::get);
    let value = f();
    (ALLOCATED.with(Cell::get) - before, value)
}

/// An item of one 400 KB string attribute (DynamoDB's largest item) and its key.
fn item(n: usize) -> String {
    format!(
        r#"{{"pk":{{"S":"item#{n}"}},"blob":{{"S":"{}"}}}}"#,
        "x".repeat(400_000)
    )
}

const BIG: usize = 16 << 20;

#[test]
fn a_16_mib_batch_is_costed_in_a_few_allocations() {
    let mut puts = Vec::new();
    let mut size = 0;
    for n in 0.. {
        let put = format!(r#"{{"PutRequest":{{"Item":{}}}}}"#, item(n));
        size += put.len();
        puts.push(put);
        if size > BIG {
            break;
        }
    }
    let half = puts.len() / 2;
    let body = format!(
        r#"{{"RequestItems":{{"orders":[{}],"lines":[{}]}},"ReturnConsumedCapacity":"TOTAL"}}"#,
        puts[..half].join(","),
        puts[half..].join(",")
    );
    assert!(body.len() > BIG);
    let (bytes, units) =
        allocated(|| dynamodb::estimate_units("BatchWriteItem", body.as_bytes(), Some("orders")));
    // 391 write units an item (400,016 bytes over 1 KiB, rounded up).
    assert_eq!(units, Some(391.0 * half as f64));
    assert!(
        bytes < 64 * 1024,
        "costing a {} byte batch allocated {bytes} bytes",
        body.len()
    );
    let (bytes, costs) = allocated(|| dynamodb::estimate("BatchWriteItem", body.as_bytes()));
    let tables: Vec<&str> = costs.iter().flatten().map(|c| c.table.as_str()).collect();
    assert_eq!(tables, ["lines", "orders"]);
    assert!(bytes < 64 * 1024, "{bytes} bytes");
}

#[test]
fn a_16_mib_transaction_is_costed_in_a_few_allocations() {
    let mut actions = Vec::new();
    let mut size = 0;
    for n in 0.. {
        let table = if n % 2 == 0 { "orders" } else { "lines" };
        let action = format!(r#"{{"Put":{{"TableName":"{table}","Item":{}}}}}"#, item(n));
        size += action.len();
        actions.push(action);
        if size > BIG {
            break;
        }
    }
    let body = format!(r#"{{"TransactItems":[{}]}}"#, actions.join(","));
    let (bytes, costs) = allocated(|| dynamodb::estimate("TransactWriteItems", body.as_bytes()));
    let costs = costs.unwrap();
    assert_eq!(costs.len(), 2);
    assert_eq!(costs[0].table, "orders");
    assert_eq!(
        costs[0].units,
        2.0 * 391.0 * actions.len().div_ceil(2) as f64
    );
    assert!(
        bytes < 64 * 1024,
        "costing a {} byte transaction allocated {bytes} bytes",
        body.len()
    );
}
