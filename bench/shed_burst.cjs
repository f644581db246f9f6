// The shed burst of bench/shed_burst.py with the AWS SDK for JavaScript v3: N
// concurrent PutItem calls on one DynamoDBClient in standard retry mode (3 attempts,
// one retry quota), every attempt's send time recorded.
//
//   node bench/shed_burst.cjs URL [CALLS] [server|fixed-1s]
//
// fixed-1s rewrites every answer's hints to `Retry-After: 1` alone (what easeoff
// sent before sheds were spread), to show the burst that comes back together.
//
// Needs @aws-sdk/client-dynamodb on NODE_PATH (.ci/run installs it under
// ~/.cache/easeoff-e2e-js/node_modules).
"use strict";

const { DynamoDBClient, PutItemCommand } = require("@aws-sdk/client-dynamodb");

const url = process.argv[2];
const calls = Number(process.argv[3] || 100);
const hint = process.argv[4] || "server";
const sends = []; // [call, attempt, seconds since start]
const attempts = new Map();
let start = 0;

const client = new DynamoDBClient({
  endpoint: url,
  region: "us-east-1",
  credentials: { accessKeyId: "k", secretAccessKey: "s" },
  retryMode: "standard",
  maxAttempts: 3,
});
client.middlewareStack.addRelativeTo(
  (next) => async (args) => {
    const call = args.input.Item.id.S;
    const n = (attempts.get(call) || 0) + 1;
    attempts.set(call, n);
    sends.push([call, n, (performance.now() - start) / 1000]);
    try {
      return await next(args);
    } catch (e) {
      const headers = e.$response && e.$response.headers;
      if (headers && hint === "fixed-1s") {
        delete headers["x-amz-retry-after"];
        headers["retry-after"] = "1";
      }
      throw e;
    }
  },
  { relation: "after", toMiddleware: "retryMiddleware", name: "recordSends" },
);

async function main() {
  start = performance.now();
  const results = await Promise.all(
    Array.from({ length: calls }, (_, i) =>
      client
        .send(new PutItemCommand({ TableName: "t", Item: { id: { S: String(i) } } }))
        .then(() => "ok", (e) => e.name),
    ),
  );
  const took = (performance.now() - start) / 1000;
  const outcome = {};
  for (const r of results) outcome[r] = (outcome[r] || 0) + 1;
  const ok = outcome.ok || 0;
  delete outcome.ok;
  console.log(`js-sdk hint=${hint}: ${ok}/${calls} succeeded in ${took.toFixed(1)} s; failed: ${JSON.stringify(outcome)}`);
  const retries = sends.filter((s) => s[1] > 1).map((s) => s[2]).sort((a, b) => a - b);
  const perCall = {};
  for (const n of attempts.values()) perCall[n] = (perCall[n] || 0) + 1;
  console.log(`attempts: ${sends.length} (${retries.length} retries); calls by attempts: ${JSON.stringify(perCall)}`);
  if (retries.length) {
    const buckets = [];
    for (const t of retries) {
      const b = Math.floor(t / 0.5);
      buckets[b] = (buckets[b] || 0) + 1;
    }
    console.log("retry arrivals per 500 ms from the start:");
    console.log("  " + Array.from(buckets, (v) => v || 0).join(" "));
    let most = 0;
    for (const t of retries) most = Math.max(most, retries.filter((u) => u >= t && u < t + 0.1).length);
    console.log(`retries in the busiest 100 ms: ${most}; first to last retry: ${(retries[retries.length - 1] - retries[0]).toFixed(2)} s`);
  }
}

main();
