//! `${VAR}` and `${VAR:-default}` in config strings, as Kubernetes manifests and
//! docker-compose files use them. The environment is passed in so tests stay pure.

/// Expands every `${VAR}` / `${VAR:-default}` in `text`; `$$` stands for a literal `$`.
/// Errors name the first variable that is unset and has no default.
pub fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if !text.contains('$') {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .ok_or_else(|| format!("unclosed \"${{\" in {text:?}"))?;
            let inner = &body[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("invalid variable name {name:?} in {text:?}"));
            }
            // `${VAR:-x}` uses x when VAR is unset or empty, as in POSIX shells.
            match (env(name).filter(|v| !v.is_empty()), default) {
                (Some(value), _) => out.push_str(&value),
                (None, Some(default)) => out.push_str(default),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (write \"${{{name}:-default}}\" to give a default)"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "AWS_REGION" => Some("eu-west-1".into()),
            "PORT" => Some("8123".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn variables_and_defaults_expand() {
        assert_eq!(expand("127.0.0.1:${PORT}", &env).unwrap(), "127.0.0.1:8123");
        assert_eq!(
            expand("${AWS_REGION:-us-east-1}", &env).unwrap(),
            "eu-west-1"
        );
        assert_eq!(expand("${NOPE:-us-east-1}", &env).unwrap(), "us-east-1");
        assert_eq!(expand("${EMPTY:-x}", &env).unwrap(), "x");
        assert_eq!(expand("no variables", &env).unwrap(), "no variables");
    }

    #[test]
    fn dollars_that_are_not_variables_stay() {
        assert_eq!(
            expand("cost $5 and $$ sign", &env).unwrap(),
            "cost $5 and $ sign"
        );
    }

    #[test]
    fn unset_variables_and_bad_syntax_are_errors() {
        assert!(
            expand("${NOPE}", &env)
                .unwrap_err()
                .contains("NOPE is not set")
        );
        assert!(expand("${PORT", &env).unwrap_err().contains("unclosed"));
        assert!(
            expand("${BAD NAME}", &env)
                .unwrap_err()
                .contains("invalid variable")
        );
    }
}
