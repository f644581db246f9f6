//! What a request costs in the units its upstream limits, before it goes and after it
//! is answered: DynamoDB's capacity units by item size (`dynamodb`), an LLM API's
//! tokens from the prompt and the answer's `usage` (`llm`). Pure functions of body
//! bytes; a body they cannot read costs what the caller assumes for an unknown one.
//!
//! Estimates are made before sending, so they are what a careful client could know:
//! a DynamoDB write's item is in the request, a read's is not (a read is costed at one
//! item); a prompt's tokens are about its characters over four, the answer's at most
//! its `max_tokens`. What the upstream reports settles them.

pub mod dynamodb;
pub mod llm;
