//! The one error a start-up plan returns ([`StartError`]): the line to print and the exit code (2: bad
//! input, 1: the environment). Below every feature, so that any plan can return it;
//! [`crate::startup`] re-exports it beside the contexts the plans receive.

/// A start-up failure: the one line to print and the exit code (2: bad input, 1: the environment).
#[derive(Debug)]
pub struct StartError {
    pub code: u8,
    pub message: String,
}

impl StartError {
    /// Bad input: a flag, variable or file the user gave (exit code 2).
    pub fn input(error: impl std::fmt::Display) -> StartError {
        StartError {
            code: 2,
            message: one_line(&error.to_string()),
        }
    }

    /// The environment failed (library missing, host engine down, port taken): exit code 1.
    pub fn environment(error: impl std::fmt::Display) -> StartError {
        StartError {
            code: 1,
            message: one_line(&error.to_string()),
        }
    }

    /// `input` or `environment`, as the error says.
    pub fn classify(bad_input: bool, error: impl std::fmt::Display) -> StartError {
        if bad_input {
            StartError::input(error)
        } else {
            StartError::environment(error)
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whitespace runs (newlines included) become one space: every start-up error is one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
