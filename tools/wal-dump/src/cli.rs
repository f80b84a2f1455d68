//! Command-line errors shared by both tools: clap's error as one line with one hint.

/// clap's message for `e` on one line, without its usage block and its own "try --help"
/// hint, ending in a single pointer to `tool --help`.
pub fn usage_error(tool: &str, e: &clap::Error) -> String {
    let text = e.to_string();
    let head = text.split("Usage:").next().unwrap_or("invalid arguments");
    let head = head
        .split("For more information, try")
        .next()
        .unwrap_or(head)
        .trim_start_matches("error: ");
    let head = head.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{head} (see {tool} --help)")
}
