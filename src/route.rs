//! Which lane a request belongs to, and which lanes an answer speaks about: pure
//! functions of request and response parts, with no state and no I/O. The lanes
//! themselves (their pacers and controllers) live in `crate::lane`.

pub mod dynamodb;
