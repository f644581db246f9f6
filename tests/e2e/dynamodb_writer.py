"""boto3 against moto's DynamoDB, for tests/sigv4_e2e.rs.

  setup MOTO_URL            create an IAM user allowed dynamodb:* and s3:* with an
                            access key (moto's first INITIAL_NO_AUTH_ACTION_COUNT=3
                            requests go unchecked), a table and a bucket; prints
                            "KEY_ID SECRET"
  write PROXY_URL MOTO_URL KEY_ID SECRET N
                            put N items through PROXY_URL with deliberately wrong
                            credentials, then read them back from moto with the right
                            ones; exit 0 when all arrived, 3 on a signature or
                            credential error (printed), 1 otherwise
"""
import json
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

REGION = "us-east-1"
TABLE = "orders"
BUCKET = "uploads"
# No SDK retries: a failure must show at once, and easeoff is what retries.
CONFIG = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=20)


def client(service, url, key_id, secret):
    return boto3.client(
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=CONFIG,
    )


def setup(moto_url):
    iam = client("iam", moto_url, "bootstrap", "bootstrap")
    iam.create_user(UserName="writer")
    key = iam.create_access_key(UserName="writer")["AccessKey"]
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["dynamodb:*", "s3:*"], "Resource": "*"}],
    }
    iam.put_user_policy(UserName="writer", PolicyName="dynamodb", PolicyDocument=json.dumps(policy))
    ddb = client("dynamodb", moto_url, key["AccessKeyId"], key["SecretAccessKey"])
    ddb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    s3 = client("s3", moto_url, key["AccessKeyId"], key["SecretAccessKey"])
    s3.create_bucket(Bucket=BUCKET)
    print(key["AccessKeyId"], key["SecretAccessKey"])


def write(proxy_url, moto_url, key_id, secret, n):
    # The writer knows nothing of the real keys: easeoff signs for it.
    writer = client("dynamodb", proxy_url, "AKIAWRONGWRONGWRONG0", "wrong-secret")
    try:
        for i in range(n):
            writer.put_item(TableName=TABLE, Item={"id": {"S": f"item-{i}"}, "n": {"N": str(i)}})
    except ClientError as e:
        error = e.response.get("Error", {})
        print(f"write failed: {error.get('Code')}: {error.get('Message')}")
        # moto answers auth failures in XML, which the JSON protocol parser leaves in
        # the message: look at both.
        text = f"{error.get('Code')} {error.get('Message')}"
        signature_errors = ("SignatureDoesNotMatch", "InvalidClientTokenId", "UnrecognizedClient")
        return 3 if any(s in text for s in signature_errors) else 1
    reader = client("dynamodb", moto_url, key_id, secret)
    missing = [
        i
        for i in range(n)
        if "Item" not in reader.get_item(TableName=TABLE, Key={"id": {"S": f"item-{i}"}}, ConsistentRead=True)
    ]
    if missing:
        print(f"items missing after the writes: {missing}")
        return 1
    print(f"all {n} items arrived")
    return 0


def main(argv):
    if argv[1] == "setup":
        setup(argv[2])
        return 0
    if argv[1] == "write":
        return write(argv[2], argv[3], argv[4], argv[5], int(argv[6]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
