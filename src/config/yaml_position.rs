//! Where a key or list item is written in a YAML file, for error messages that name `file:line:column`
//! after serde has accepted the document's shape (a value out of range, a field that does not exist).
//! serde_norway reports positions for the errors it finds itself, but gives none to the values it
//! produces; this walks block-style YAML (the usual form of configuration files) by indentation to
//! find a path such as `collection.watchGroups[1].interval`. In flow style (`{a: 1}`) it stops at the
//! deepest part it can find and names that.

/// One step of a path: a mapping key or a sequence index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// One significant piece of a line: a key (`name: value`) or a list item marker (`-`).
#[derive(Debug)]
struct Entry<'t> {
    line: usize,
    /// 0-based column of the entry's first character.
    col: usize,
    text: &'t str,
}

fn entries(text: &str) -> Vec<Entry<'_>> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let mut rest = raw;
        let mut col = raw.len() - raw.trim_start().len();
        rest = &rest[col..];
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with("---") {
            continue;
        }
        // `- - key: v`: each `-` is an item marker, then the content one level deeper.
        while let Some(after) = rest
            .strip_prefix('-')
            .filter(|a| a.is_empty() || a.starts_with(' '))
        {
            out.push(Entry {
                line: n + 1,
                col,
                text: "-",
            });
            let skip = 1 + (after.len() - after.trim_start().len());
            col += skip;
            rest = &rest[skip..];
            if rest.is_empty() {
                break;
            }
        }
        if !rest.is_empty() && !rest.starts_with('#') {
            out.push(Entry {
                line: n + 1,
                col,
                text: rest,
            });
        }
    }
    out
}

fn is_key(text: &str, key: &str) -> bool {
    let unquoted = text
        .strip_prefix('"')
        .and_then(|t| t.strip_prefix(key))
        .and_then(|t| t.strip_prefix('"'))
        .or_else(|| {
            text.strip_prefix('\'')
                .and_then(|t| t.strip_prefix(key))
                .and_then(|t| t.strip_prefix('\''))
        })
        .or_else(|| text.strip_prefix(key));
    unquoted.is_some_and(|t| t.trim_start().starts_with(':'))
}

/// 1-based (line, column) of `path` in `text`: exact for block style, else the deepest step found
/// ((1, 1) when not even the first).
pub fn locate(text: &str, path: &[Step<'_>]) -> (usize, usize) {
    let all = entries(text);
    let mut found = (1, 1);
    // The entries below the current node, and the column its children must be deeper than.
    let mut region: &[Entry<'_>] = &all;
    let mut parent_col: Option<usize> = None;
    for step in path {
        // Below a key, a sequence may start at the key's own column (`key:\n- item`).
        let deeper: Vec<usize> = region
            .iter()
            .enumerate()
            .filter(|(_, e)| match (parent_col, step) {
                (None, _) => true,
                (Some(p), Step::Index(_)) => e.col > p || (e.col == p && e.text == "-"),
                (Some(p), Step::Key(_)) => e.col > p,
            })
            .map(|(i, _)| i)
            .collect();
        let Some(child_col) = deeper.iter().map(|&i| region[i].col).min() else {
            return found;
        };
        let at_level: Vec<usize> = deeper
            .into_iter()
            .filter(|&i| region[i].col == child_col)
            .collect();
        let hit = match step {
            Step::Key(k) => at_level.into_iter().find(|&i| is_key(region[i].text, k)),
            Step::Index(n) => at_level
                .into_iter()
                .filter(|&i| region[i].text == "-")
                .nth(*n),
        };
        let Some(i) = hit else {
            return found;
        };
        let e = &region[i];
        found = (e.line, e.col + 1);
        let is_item = e.text == "-";
        let end = region[i + 1..]
            .iter()
            .position(|x| x.col < e.col || (x.col == e.col && (is_item || x.text != "-")))
            .map_or(region.len(), |p| i + 1 + p);
        region = &region[i + 1..end];
        parent_col = Some(e.col);
    }
    found
}

/// The second `key:` written at `(line, column)`'s indentation from that line on — where serde_norway's
/// "duplicate field" error (which points at the mapping) really is.
pub fn duplicate_key(text: &str, at: (usize, usize), key: &str) -> Option<(usize, usize)> {
    entries(text)
        .into_iter()
        .filter(|e| e.line >= at.0 && e.col + 1 == at.1 && is_key(e.text, key))
        .nth(1)
        .map(|e| (e.line, e.col + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::{Index, Key};

    const DOC: &str = "version: 1\n# comment\nmetrics:\n  fields:\n    - name: A\n      help: x\n    - name: B\n      prometheusType: gauge\ncollection:\n  interval: 30s\n  watchGroups:\n  - name: slow\n    interval: 5m\n    fields: [\"X*\"]\n";

    #[test]
    fn finds_keys_and_items() {
        assert_eq!(locate(DOC, &[Key("version")]), (1, 1));
        assert_eq!(
            locate(DOC, &[Key("metrics"), Key("fields"), Index(1)]),
            (7, 5)
        );
        assert_eq!(
            locate(
                DOC,
                &[
                    Key("metrics"),
                    Key("fields"),
                    Index(1),
                    Key("prometheusType")
                ]
            ),
            (8, 7)
        );
        assert_eq!(
            locate(DOC, &[Key("metrics"), Key("fields"), Index(0), Key("name")]),
            (5, 7)
        );
        assert_eq!(locate(DOC, &[Key("collection"), Key("interval")]), (10, 3));
        assert_eq!(
            locate(
                DOC,
                &[
                    Key("collection"),
                    Key("watchGroups"),
                    Index(0),
                    Key("interval")
                ]
            ),
            (13, 5)
        );
        // Not there: the deepest step found.
        assert_eq!(locate(DOC, &[Key("collection"), Key("nope")]), (9, 1));
        assert_eq!(
            locate(
                "metrics: {fields: [{name: a}]}\n",
                &[Key("metrics"), Key("fields")]
            ),
            (1, 1)
        );
        assert_eq!(
            duplicate_key("a: 1\nb:\n  c: 1\n  c: 2\n", (3, 3), "c"),
            Some((4, 3))
        );
    }
}
