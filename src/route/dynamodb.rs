//! DynamoDB's units of capacity as its requests and answers name them: the operation's
//! access kind (read, write, control plane), the tables a request touches, and the
//! throttled resources an error's `ThrottlingReasons` lists.
