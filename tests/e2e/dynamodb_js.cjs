// The AWS SDK for JavaScript v3 against moto's DynamoDB through easeoff, for
// tests/js_sdk_e2e.rs. The client has deliberately wrong credentials: easeoff signs
// with the right ones. Every call a DynamoDB application makes, and the failures it
// must be able to name, are checked; one line per check, "ok NAME" or "FAILED NAME:
// why", then a summary. Exit 0 when every check passed, 1 otherwise.
//
//   node dynamodb_js.cjs PROXY_URL
//
// Needs @aws-sdk/client-dynamodb on NODE_PATH (.ci/run installs it).

"use strict";

const {
  DynamoDBClient,
  PutItemCommand,
  GetItemCommand,
  QueryCommand,
  TransactWriteItemsCommand,
} = require("@aws-sdk/client-dynamodb");

const TABLE = "orders";
const proxy = process.argv[2];

function client(extra = {}) {
  return new DynamoDBClient({
    endpoint: proxy,
    region: "us-east-1",
    credentials: { accessKeyId: "AKIAWRONGWRONGWRONG0", secretAccessKey: "wrong-secret" },
    // easeoff absorbs throttles; a failure must show at once.
    maxAttempts: 1,
    ...extra,
  });
}

/** Adds `Expect: 100-continue` to every request, as the S3 clients do on uploads. */
function expectContinue(c) {
  c.middlewareStack.add(
    (next) => async (args) => {
      args.request.headers["Expect"] = "100-continue";
      return next(args);
    },
    { step: "build", name: "expectContinue" },
  );
  return c;
}

let failed = 0;
async function check(name, f) {
  try {
    const detail = await f();
    console.log(`ok ${name}${detail ? ` (${detail})` : ""}`);
  } catch (e) {
    failed += 1;
    const status = e.$metadata ? ` status ${e.$metadata.httpStatusCode}` : "";
    console.log(`FAILED ${name}: ${e.name}${status}: ${e.message}`);
  }
}

/** Runs `f`, which must fail; returns the error. */
async function rejection(f) {
  try {
    await f();
  } catch (e) {
    return e;
  }
  throw new Error("expected an error, the call succeeded");
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

async function main() {
  const ddb = client();
  const key = (id) => ({ id: { S: id } });

  await check("PutItem and GetItem", async () => {
    await ddb.send(new PutItemCommand({ TableName: TABLE, Item: { ...key("js-1"), n: { N: "1" } } }));
    const got = await ddb.send(new GetItemCommand({ TableName: TABLE, Key: key("js-1"), ConsistentRead: true }));
    assert(got.Item && got.Item.n.N === "1", `got ${JSON.stringify(got.Item)}`);
  });

  await check("Query", async () => {
    const got = await ddb.send(
      new QueryCommand({
        TableName: TABLE,
        KeyConditionExpression: "id = :id",
        ExpressionAttributeValues: { ":id": { S: "js-1" } },
      }),
    );
    assert(got.Count === 1, `Count ${got.Count}`);
    return `Count ${got.Count}`;
  });

  await check("conditional failure is named", async () => {
    const e = await rejection(() =>
      ddb.send(
        new PutItemCommand({
          TableName: TABLE,
          Item: key("js-1"),
          ConditionExpression: "attribute_not_exists(id)",
        }),
      ),
    );
    assert(e.name === "ConditionalCheckFailedException", `${e.name}: ${e.message}`);
    return e.name;
  });

  await check("cancelled transaction is named", async () => {
    const e = await rejection(() =>
      ddb.send(
        new TransactWriteItemsCommand({
          TransactItems: [
            { Put: { TableName: TABLE, Item: key("js-2") } },
            {
              ConditionCheck: {
                TableName: TABLE,
                Key: key("js-1"),
                ConditionExpression: "attribute_not_exists(id)",
              },
            },
          ],
        }),
      ),
    );
    assert(e.name === "TransactionCanceledException", `${e.name}: ${e.message}`);
    return e.name;
  });

  await check("300 KB item round-trips", async () => {
    const big = "x".repeat(300 * 1024);
    await ddb.send(new PutItemCommand({ TableName: TABLE, Item: { ...key("js-big"), blob: { S: big } } }));
    const got = await ddb.send(new GetItemCommand({ TableName: TABLE, Key: key("js-big"), ConsistentRead: true }));
    assert(got.Item && got.Item.blob.S === big, "the item came back different");
    return `${big.length} bytes`;
  });

  await check("Expect: 100-continue passes the signature check", async () => {
    const c = expectContinue(client());
    await c.send(new PutItemCommand({ TableName: TABLE, Item: { ...key("js-expect"), n: { N: "2" } } }));
    const got = await c.send(new GetItemCommand({ TableName: TABLE, Key: key("js-expect"), ConsistentRead: true }));
    assert(got.Item && got.Item.n.N === "2", `got ${JSON.stringify(got.Item)}`);
  });

  await check("a 17 MiB item gets the 413, not a broken pipe", async () => {
    const huge = "x".repeat(17 * 1024 * 1024);
    const e = await rejection(() =>
      ddb.send(new PutItemCommand({ TableName: TABLE, Item: { ...key("js-huge"), blob: { S: huge } } })),
    );
    const status = e.$metadata && e.$metadata.httpStatusCode;
    assert(status === 413, `${e.name} (${e.code || "no code"}, status ${status}): ${e.message}`);
    return `${e.name}, status ${status}`;
  });

  console.log(failed === 0 ? "all checks passed" : `${failed} checks failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main().catch((e) => {
  console.log(`FAILED: ${e.stack}`);
  process.exit(1);
});
