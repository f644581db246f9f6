//! What went wrong with the fleet's Redis, in the classes an operator acts on: each
//! has a metric label, a log line and a `/status` reason. Every class means "Redis is
//! unavailable for now" for what it touches: a wrong type on one lane's key costs that
//! lane its sync, the others go on sharing; the rest cost every lane.

use redis::{ErrorKind, RedisError};

crate::spelled::spelled! {
    fn as_str;
    /// One class of Redis failure.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Fault {
        /// No connection: refused, reset, or no route.
        Unreachable = "unreachable",
        /// No answer within the sync's time.
        Timeout = "timeout",
        /// The password or user is wrong, or the user may not run the commands.
        Auth = "auth",
        /// Redis refuses writes at `maxmemory` (`OOM`).
        OutOfMemory = "oom",
        /// A read-only replica (`READONLY`).
        ReadOnly = "readonly",
        /// The sync script is missing and loading it again did not help (`NOSCRIPT`).
        NoScript = "noscript",
        /// A lane's key holds something other than a hash (`WRONGTYPE`).
        WrongType = "wrongtype",
        /// The server does not speak Redis's protocol.
        NotRedis = "not-redis",
        /// Any other error.
        Other = "other",
    }
}

impl Fault {
    /// The class of `error`.
    pub fn of(error: &RedisError) -> Fault {
        if error.is_timeout() {
            return Fault::Timeout;
        }
        match error.kind() {
            ErrorKind::AuthenticationFailed => return Fault::Auth,
            ErrorKind::Parse => return Fault::NotRedis,
            _ => {}
        }
        if let Some(fault) = error.code().and_then(Fault::of_code) {
            return fault;
        }
        // An error raised inside the script may come wrapped (`ERR ... script: ...`):
        // the first known code in its text names it.
        let text = error.to_string();
        let named = text
            .split(|c: char| !c.is_ascii_alphabetic())
            .find_map(Fault::of_code);
        match named {
            Some(fault) => fault,
            None if error.is_io_error() || error.is_connection_refusal() => Fault::Unreachable,
            None => Fault::Other,
        }
    }

    fn of_code(code: &str) -> Option<Fault> {
        Some(match code {
            "OOM" => Fault::OutOfMemory,
            "READONLY" => Fault::ReadOnly,
            "NOSCRIPT" => Fault::NoScript,
            "WRONGPASS" | "NOAUTH" | "NOPERM" => Fault::Auth,
            "WRONGTYPE" => Fault::WrongType,
            _ => return None,
        })
    }

    /// What it means for the operator, for the log and `/status`.
    pub fn meaning(self) -> &'static str {
        match self {
            Fault::Unreachable => "redis cannot be reached",
            Fault::Timeout => "redis does not answer in time",
            Fault::Auth => {
                "redis refuses the credentials: check the password (or user) in the redis url"
            }
            Fault::OutOfMemory => "redis refuses writes: it is at maxmemory (OOM)",
            Fault::ReadOnly => {
                "redis refuses writes: it is a read-only replica; point the url at the primary"
            }
            Fault::NoScript => "redis cannot keep the sync script (NOSCRIPT after loading it)",
            Fault::WrongType => "a lane's key in redis is not a hash (WRONGTYPE); delete the key",
            Fault::NotRedis => "the server at the redis url does not speak redis",
            Fault::Other => "redis answers with an error",
        }
    }

    /// Whether it concerns one key only: the other lanes go on syncing.
    pub fn one_key(self) -> bool {
        self == Fault::WrongType
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(text: &str) -> RedisError {
        // How redis-rs reads an error reply: its first word is the code.
        let reply = format!("-{text}\r\n");
        match redis::parse_redis_value(reply.as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e.into(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_reply_code_has_its_class() {
        for (reply, fault) in [
            (
                "OOM command not allowed when used memory > 'maxmemory'.",
                Fault::OutOfMemory,
            ),
            (
                "READONLY You can't write against a read only replica.",
                Fault::ReadOnly,
            ),
            (
                "NOSCRIPT No matching script. Please use EVAL.",
                Fault::NoScript,
            ),
            (
                "WRONGPASS invalid username-password pair or user is disabled.",
                Fault::Auth,
            ),
            ("NOAUTH Authentication required.", Fault::Auth),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value script: 1f, on @user_script:9.",
                Fault::WrongType,
            ),
            (
                "ERR Error running script (call to f_1f): @user_script:9: WRONGTYPE Operation against a key",
                Fault::WrongType,
            ),
            ("ERR unknown command 'EVALSHA'", Fault::Other),
        ] {
            assert_eq!(Fault::of(&server(reply)), fault, "{reply}");
        }
    }

    #[test]
    fn only_a_wrong_type_stays_with_its_key() {
        let one: Vec<Fault> = Fault::ALL.into_iter().filter(|f| f.one_key()).collect();
        assert_eq!(one, [Fault::WrongType]);
        // Every class is exported from the start, and no other.
        assert_eq!(
            Fault::ALL.map(Fault::as_str),
            crate::metrics::REDIS_ERROR_CLASSES
        );
    }
}
