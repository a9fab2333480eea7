//! One line for an error and its causes, `outer: inner: innermost`, for logs and messages about a
//! peer (the Kubernetes API, the kubelet, an OTLP receiver): the HTTP and gRPC clients' own messages
//! ("client error (Connect)") say little without the cause underneath.

use std::error::Error;

/// `e` and each of its sources, joined by `": "`; a source whose text the line already contains
/// (many errors repeat their cause in their own message) is left out.
pub fn error_chain(e: &(dyn Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(inner) = cause {
        let text = inner.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = inner.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn joins_causes_and_skips_repeated_ones() {
        let io = E("connection refused", None);
        let connect = E("tcp connect error: connection refused", Some(Box::new(io)));
        let outer = E("client error (Connect)", Some(Box::new(connect)));
        assert_eq!(
            error_chain(&outer),
            "client error (Connect): tcp connect error: connection refused"
        );
        assert_eq!(error_chain(&E("alone", None)), "alone");
    }
}
