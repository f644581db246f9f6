//! What a lane costs the process: no file descriptor of its own, even while it paces.
//! The real binary under a descriptor limit far below the number of lanes it makes.

mod support;

use bytes::Bytes;
use support::*;

const TABLES: usize = 600;

/// 600 tables, each a lane pacing at 2 ms (so each lane's second request waits for
/// its slot), under a limit of 256 descriptors: a lane that held a timerfd for its
/// life would run the process out of descriptors; every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pacing_lanes_fit_in_few_descriptors() {
    let up = upstream(|_| async { respond(200, &[], "{}") }).await;
    let config = config_file(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nruntime = \"multi-thread\"\n\n{}",
        upstream_table(
            "ddb",
            up.addr,
            "preset = \"dynamodb\"\n[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"2ms\"\n[upstream.lanes]\nmax_lanes = 1000\n",
        )
    ));
    let easeoff = Process::start_limited(&config, 256);
    let pid = easeoff.child.id();
    let url = easeoff.url("ddb");
    let client = client();
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..16 {
        let (client, url) = (client.clone(), url.clone());
        tasks.spawn(async move {
            let mut most_fds = 0;
            for table in (writer..TABLES).step_by(16) {
                let body = format!(r#"{{"TableName":"t{table}","Item":{{"pk":{{"S":"1"}}}}}}"#);
                for _ in 0..2 {
                    let headers = [("x-amz-target", "DynamoDB_20120810.PutItem")];
                    let answer =
                        send(&client, "POST", &url, &headers, Bytes::from(body.clone())).await;
                    assert_eq!(answer.status, 200, "table t{table}: {}", answer.text());
                }
                most_fds = most_fds.max(open_fds(pid));
            }
            most_fds
        });
    }
    let mut most_fds = 0;
    while let Some(done) = tasks.join_next().await {
        most_fds = most_fds.max(done.unwrap());
    }
    let lanes = metric(easeoff.admin, "easeoff_lanes{upstream=\"ddb\"}").await;
    assert!(lanes > TABLES as f64, "{lanes} lanes");
    assert!(most_fds < 128, "{most_fds} descriptors open");
    println!("{lanes} lanes pacing at 2 ms, at most {most_fds} descriptors open (limit 256)");
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}
