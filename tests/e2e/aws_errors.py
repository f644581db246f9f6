"""boto3 against easeoff's own answers, for tests/aws_errors.rs.

  aws_errors.py URL ATTEMPTS

One DynamoDB PutItem through URL in botocore's standard retry mode with ATTEMPTS
attempts in all; prints one JSON line: the error code botocore named, the HTTP status,
whether botocore treated it as retryable (it sent more than one attempt), seconds to
the first answer and to the end, and the x-amz-retry-after values seen.
"""
import json
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def main():
    url, attempts = sys.argv[1], int(sys.argv[2])
    c = boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=Config(retries={"mode": "standard", "total_max_attempts": attempts}, read_timeout=60),
    )
    start = time.monotonic()
    answers = []  # (seconds since start, x-amz-retry-after)

    def before_parse(response_dict, **_):
        answers.append((time.monotonic() - start, response_dict["headers"].get("x-amz-retry-after")))

    c.meta.events.register("before-parse.dynamodb", before_parse)
    out = {"code": None, "status": None}
    try:
        c.put_item(TableName="t", Item={"id": {"S": "1"}})
        out["code"] = "ok"
    except ClientError as e:
        out["code"] = e.response["Error"]["Code"]
        out["status"] = e.response["ResponseMetadata"]["HTTPStatusCode"]
        out["message"] = e.response["Error"].get("Message")
    out["attempts"] = len(answers)
    out["first_answer_s"] = answers[0][0] if answers else None
    out["total_s"] = time.monotonic() - start
    out["retry_after_ms"] = [h for _, h in answers]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
